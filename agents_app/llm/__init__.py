"""LLM adapters: the protocol and factory (`base`), the scripted default, OpenAI-compatible."""
