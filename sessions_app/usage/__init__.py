"""Usage stores: the contract (`base`), its backends (`orm`, `memory`) and the accessor."""

from sessions_app.conf import load_backend
from sessions_app.usage.base import UsageStore


def get_usage_store() -> UsageStore:
    """Return the store ``HELIX["USAGE_STORE"]`` configures."""
    return load_backend("USAGE_STORE", "sessions_app.usage.orm.ORMUsageStore")
