"""WebSocket URL routes; each app contributes its consumers here."""

from agents_app.routing import websocket_urlpatterns as agent_state_routes
from streams_app.routing import websocket_urlpatterns as stream_routes

websocket_urlpatterns = [*stream_routes, *agent_state_routes]
