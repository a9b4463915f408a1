from django.urls import path

from streams_app.consumers import StreamConsumer

websocket_urlpatterns = [
    path("ws/sessions/<session_id:session_id>/stream", StreamConsumer.as_asgi()),
]
