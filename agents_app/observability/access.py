"""Who may read metrics: a bearer token (`HELIX["METRICS_TOKEN"]`), or a staff user's session."""

import hmac

from sessions_app.conf import helix_setting


def token_allows(authorization: str | None) -> bool:
    """Return whether an `Authorization` header carries the metrics token (none is set: no)."""
    token = helix_setting("METRICS_TOKEN", "")
    scheme, _, given = (authorization or "").partition(" ")
    return bool(token) and scheme.lower() == "bearer" and hmac.compare_digest(given, token)
