from typing import Any

from django.apps import AppConfig
from django.db.backends.signals import connection_created
from django.urls import register_converter
from django.urls.converters import get_converters


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Agent sessions"

    def ready(self) -> None:
        """Register the `session_id` path converter and the SQLite functions, once however often
        Django calls this (tests that change INSTALLED_APPS call it again)."""
        from sessions_app.converters import SessionIdConverter

        if "session_id" not in get_converters():
            register_converter(SessionIdConverter, "session_id")
        connection_created.connect(_register_sqlite_functions)


def _register_sqlite_functions(sender: Any, connection: Any, **kwargs: Any) -> None:
    """Give each SQLite connection the functions the message search triggers call."""
    if connection.vendor == "sqlite":
        from sessions_app.stores.search import register_sqlite_functions

        register_sqlite_functions(connection.connection)
