"""Chat: the unified chat entry (`service`), the Vercel AI SDK's UI messages and UI message
stream, and the embeddable chat page."""
