"""Conversation memory (reference 002): context blocks, the frozen system prompt, the context
tools, compaction and the session manager, over the session store's message tree."""
