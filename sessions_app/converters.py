"""The `session_id` path converter: what a session id can be (see `rules.check_identifier`)."""

from sessions_app.stores.rules import MAX_IDENTIFIER_LENGTH


class SessionIdConverter:
    """Match a session id in a path; a longer one is no route at all, so it answers 404."""

    regex = f"[^/\\x00]{{1,{MAX_IDENTIFIER_LENGTH}}}"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value
