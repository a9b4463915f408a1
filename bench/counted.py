"""The side `bench.instructions` counts, in a process of its own under callgrind.

`python -m bench.counted SIDE OWNER FILE`: SIDE is `ours` or `floor`, OWNER the id of the user
whose sessions these are, FILE the ids of the sessions to run, one a line, made by the
benchmark. It starts every session's run, marks the count (`MARK`), then takes every run
whole, at once, in this thread: ours, `agent_start`, then `executor.run_steps` of the waiter's
steps given at once (`bench-waiter-instant`); the floor's, `floor_start`, then its chain's hops
in one call (`floor_waiting_run`, with no wait). The starts' step tasks go to the queue the
environment names, which no worker reads.
"""

import os
import sys
from pathlib import Path

import django

# Called between the starts and the runs: callgrind dumps its count there (`--dump-before`).
# Nothing else this process runs calls it.
MARK = "getloadavg"


def main(side: str, owner_id: int, session_ids: list[str]) -> None:
    """Start every session's run of `side`, mark the count, then take every run."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "helix_project.settings")
    django.setup()
    from django.contrib.auth import get_user_model

    from agents_app.runs.services import agent_start
    from agents_app.runtime import executor
    from bench import agents
    from bench.floor import floor_start, floor_waiting_run

    owner = get_user_model().objects.get(pk=owner_id)
    if side == "ours":
        run_ids = [
            agent_start(
                user=owner,
                agent_type=agents.INSTANT_WAITER_AGENT_TYPE,
                message="Take your time.",
                session_id=session_id,
            ).run_id
            for session_id in session_ids
        ]
    else:
        for session_id in session_ids:
            floor_start(session_id, agents.WAITER_STEPS, 0.0, hops=False)
    os.getloadavg()  # MARK
    if side == "ours":
        for session_id, run_id in zip(session_ids, run_ids, strict=True):
            executor.run_steps(session_id, run_id, 1, time_slice=60.0)
    else:
        for session_id in session_ids:
            floor_waiting_run.run(session_id, agents.WAITER_STEPS, 0.0)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]).read_text().split())
