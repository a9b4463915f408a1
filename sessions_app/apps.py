from django.apps import AppConfig
from django.urls import register_converter


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Agent sessions"

    def ready(self) -> None:
        from sessions_app.converters import SessionIdConverter

        register_converter(SessionIdConverter, "session_id")
