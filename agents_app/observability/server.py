"""A worker's own `/metrics`, on `HELIX_WORKER_METRICS_PORT`: workers serve no HTTP otherwise.

It answers only the bearer of the metrics token (`HELIX["METRICS_TOKEN"]`): a worker has no
sessions to know staff users by.
"""

import logging
import threading
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app

from agents_app.observability.access import token_allows

logger = logging.getLogger(__name__)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """Log nothing per scrape."""


def serve_metrics(host: str, port: int) -> WSGIServer:
    """Serve this process's metrics on `host:port` from a daemon thread; return the server."""
    metrics = make_wsgi_app()

    def app(environ, start_response):
        if not token_allows(environ.get("HTTP_AUTHORIZATION")):
            start_response("401 Unauthorized", [("Content-Type", "text/plain")])
            return [b"Send the metrics token as a bearer token.\n"]
        return metrics(environ, start_response)

    server = make_server(host, port, app, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="helix-metrics", daemon=True).start()
    logger.info("Serving metrics on %s:%s", host, port)
    return server
