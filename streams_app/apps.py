from django.apps import AppConfig


class StreamsAppConfig(AppConfig):
    name = "streams_app"
    verbose_name = "Streams"
