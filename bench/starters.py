"""Processes that start runs as the API's processes would, for `bench.inflight`.

They are spawned, not forked (the benchmark's process runs threads), so a child imports this
module before Django is set up: Django and Helix are imported once `become_starter` has set it
up, on the environment the benchmark gives.
"""

import os
from concurrent.futures import ThreadPoolExecutor


def become_starter(env: dict[str, str], queue: str) -> None:
    """Set up a starting process: Django on `env`, its steps sent to `queue`."""
    os.environ.update(env)
    import django

    django.setup()
    from helix_project.celery import app

    app.conf.task_default_queue = queue


def start_runs(
    owner_id: int, agent_type: str, message: str, session_ids: list[str], threads: int
) -> list[str]:
    """Start a run on each session from `threads` threads, as many users would; return the
    runs' ids in the sessions' order."""
    from django.contrib.auth import get_user_model
    from django.db import connections

    from agents_app.runs.services import agent_start

    owner = get_user_model().objects.get(pk=owner_id)

    def start(session_id: str) -> str:
        try:
            started = agent_start(
                user=owner, agent_type=agent_type, message=message, session_id=session_id
            )
            return started.run_id
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(start, session_ids))
