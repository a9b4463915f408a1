"""Session state stores: the contract (`base`), its backends (`orm`, `memory`) and the accessor."""

from sessions_app.conf import load_backend
from sessions_app.stores.base import SessionStateStore


def get_session_store() -> SessionStateStore:
    """Return the store ``HELIX["SESSION_STORE"]`` configures."""
    return load_backend("SESSION_STORE", "sessions_app.stores.orm.ORMSessionStateStore")
