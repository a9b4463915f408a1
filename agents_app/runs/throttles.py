"""Limits on how often a user may start runs."""

from rest_framework.throttling import UserRateThrottle

from sessions_app.conf import helix_setting


class RunStartThrottle(UserRateThrottle):
    """Allow each user `HELIX["RUN_START_RATE"]` run starts (`60/minute` unless set; None for no
    limit); beyond it, 429 with Retry-After."""

    scope = "run-start"

    def get_rate(self) -> str | None:
        return helix_setting("RUN_START_RATE", "60/minute")
