"""WebSocket URL routes; each app contributes its consumers here."""

from streams_app.routing import websocket_urlpatterns as stream_routes

websocket_urlpatterns = [*stream_routes]
