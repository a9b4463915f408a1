"""Errors of context blocks; their messages are the reference's, which the context tools return."""

from sessions_app.errors import HelixError, InvalidInput


class InvalidContextBlock(InvalidInput):
    """A block's spec is not valid: its label, its token limit or its provider."""

    code = "invalid-context-block"


class InvalidSkillKey(InvalidInput):
    """A skill key is not a plain file name (it would leave the skill folder)."""

    code = "invalid-skill-key"

    def __init__(self, key: str) -> None:
        super().__init__(
            f"Skill key {key!r} is not valid: use letters, digits, '.', '_' and '-', "
            "not starting with '.'.",
            key=key,
        )


class ContextBlockNotFound(HelixError):
    code = "context-block-not-found"
    http_status = 404

    def __init__(self, label: str) -> None:
        super().__init__(f'Block "{label}" not found', label=label)


class ContextBlockExists(HelixError):
    code = "context-block-exists"
    http_status = 409

    def __init__(self, label: str) -> None:
        super().__init__(f'Block "{label}" already exists', label=label)


class ContextBlockReadonly(HelixError):
    code = "context-block-readonly"
    http_status = 409

    def __init__(self, label: str) -> None:
        super().__init__(f'Block "{label}" is readonly', label=label)


class ContextBlockKeyed(HelixError):
    """Whole-block writes go to plain blocks; skill and search blocks take keyed entries."""

    code = "context-block-keyed"
    http_status = 409

    def __init__(self, label: str) -> None:
        super().__init__(
            f'Block "{label}" is a keyed provider. Use set_entry() instead.', label=label
        )


class ContextBlockUnsupported(HelixError):
    """The block's provider cannot do what was asked (load, search, or keyed writes)."""

    code = "context-block-unsupported"
    http_status = 409

    def __init__(self, label: str, problem: str) -> None:
        super().__init__(f'Block "{label}" {problem}', label=label)


class ContextBlockConfigured(HelixError):
    """Only blocks added at run time can be removed; configured ones come with the agent."""

    code = "context-block-configured"
    http_status = 409

    def __init__(self, label: str) -> None:
        super().__init__(
            f'Block "{label}" is configured, not added at run time: it cannot be removed',
            label=label,
        )


class ContextBlockTooLarge(HelixError):
    """A write would take a block past its `max_tokens`; nothing was written."""

    code = "context-block-too-large"
    http_status = 422

    def __init__(self, label: str, *, tokens: int, max_tokens: int) -> None:
        super().__init__(
            f'Block "{label}" exceeds maxTokens: {tokens} > {max_tokens}',
            label=label,
            tokens=tokens,
            max_tokens=max_tokens,
        )
        self.tokens = tokens
        self.max_tokens = max_tokens


class NoCompactor(HelixError):
    """The session's agent configures no compactor, so its memory cannot be compacted."""

    code = "no-compactor"
    http_status = 409

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"Session {session_id!r} has no compactor: its agent's memory configures none.",
            session_id=session_id,
        )


class CompactionFailed(HelixError):
    """The compactor's model call failed; no overlay was stored."""

    code = "compaction-failed"
    http_status = 502

    def __init__(self, session_id: str, problem: str) -> None:
        super().__init__(f"Compaction failed: {problem}", session_id=session_id)
