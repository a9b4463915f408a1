"""Stream managers: the contract (`base`), its backends (`orm`, `memory`) and the accessor."""

from sessions_app.conf import load_backend
from streams_app.backends.base import StreamManager


def get_stream_manager() -> StreamManager:
    """Return the stream manager ``HELIX["STREAM_MANAGER"]`` configures."""
    return load_backend("STREAM_MANAGER", "streams_app.backends.orm.ORMStreamManager")
