"""Conversation memory (reference 002) as agents use it: a session's memory in a step and its
tools (`session`), and the services the API calls (`services`)."""
