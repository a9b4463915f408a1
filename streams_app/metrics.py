"""Prometheus metrics of the live record: chunks written, and clients following streams.

Each process counts its own (a worker writes chunks, Daphne serves clients); Prometheus scrapes
every process and sums them (README "Metrics").
"""

from prometheus_client import Counter, Gauge

CHUNKS_WRITTEN = Counter("helix_stream_chunks_written", "Stream chunks this process wrote.")
CLIENTS = Gauge(
    "helix_stream_clients",
    "Clients following a stream from this process now.",
    ["transport"],  # websocket or sse
)
