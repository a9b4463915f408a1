"""`manage.py serve` runs the embedded system: Daphne with static files, a Celery worker, and
Celery beat running the expired-session sweep."""

import re
import signal

import pytest

from tests.agents_app.serving import Serve, group_alive, http_status
from tests.helix_project.environment import manage

# Celery 5.7 has no `celery.ping` task; `celery.accumulate` is a built-in that returns its args.
SEND_PING = (
    "from helix_project.celery import app; "
    "print(app.send_task('celery.accumulate', args=['ping']).id)"
)

# Start the demo research agent as a new user would, and wait for its run to end.
RUN_DEMO = """
import time
from django.contrib.auth import get_user_model
from agents_app.runs.services import agent_start
from sessions_app.stores import get_session_store
user = get_user_model().objects.create_user("demo")
started = agent_start(user=user, agent_type="researcher", message="What is celery?")
for _ in range(300):
    state = get_session_store().load_state(started.session_id)
    if state.status != "active":
        break
    time.sleep(0.1)
print(state.status, state.output["sources"])
"""


@pytest.mark.one_backend("sqlite", reason="serve runs the embedded default whatever the run's")
def test_serve_runs_site_worker_and_beat_and_stops_on_sigint(serve: Serve) -> None:
    login = f"{serve.site}/admin/login/"
    serve.wait_for(lambda: http_status(login) == 200, 60, "the login page answered 200")
    assert http_status(f"{serve.site}/static/admin/css/base.css") == 200
    serve.wait_for(lambda: " ready." in serve.output(), 60, "the Celery worker was ready")

    sent = manage("shell", "-v", "0", "-c", SEND_PING, env=serve.env)
    assert sent.returncode == 0, sent.stdout + sent.stderr
    task_id = sent.stdout.split()[-1]
    serve.wait_for(
        lambda: f"Task celery.accumulate[{task_id}] succeeded" in serve.output(),
        30,
        "the worker ran the task sent through the filesystem broker",
    )

    demo = manage("shell", "-v", "0", "-c", RUN_DEMO, env=serve.env)
    assert demo.stdout.split() == ["completed", "['celery']"], demo.stdout + demo.stderr

    serve.wait_for(
        lambda: re.search(
            r"Task agents_app.tasks.cleanup_expired_sessions_task\[\S+\] succeeded", serve.output()
        ),
        30,
        "beat had the worker run the expired-session sweep",
    )

    children = serve.child_pids()
    assert len(children) == 3
    serve.process.send_signal(signal.SIGINT)
    assert serve.process.wait(timeout=15) == 0
    assert [pgid for pgid in children if group_alive(pgid)] == []
