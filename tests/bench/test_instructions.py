"""The instruction counts: callgrind's counts are read right, part by part, and each counted
side takes its runs to their end."""

import shutil
import subprocess
import sys

import pytest
from celery import current_app
from django.db import connection

from agents_app.runs.services import agent_session_create
from bench import agents
from bench.counted import MARK
from bench.floor import FloorTables
from bench.instructions import count_instructions
from bench.raw import connect
from bench.steps import own_queue
from sessions_app.models import Run
from tests.live import ROOT, live_env

# Backend-agnostic: the count of a bare interpreter.
ONE_PASS = pytest.mark.one_backend("postgresql", reason="counts a bare interpreter, no database")


@ONE_PASS
def test_count_instructions_counts_the_parts_between_marks_and_refuses_a_failed_command(tmp_path):
    valgrind = shutil.which("valgrind")
    assert valgrind, "the benchmark counts with valgrind, which every machine of this kind has"
    env = live_env(tmp_path)

    [idle] = count_instructions(valgrind, [sys.executable, "-c", "pass"], env)
    before, after = count_instructions(
        valgrind,
        [sys.executable, "-c", f"import os; sum(range(10**6)); os.{MARK}(); sum(range(3 * 10**6))"],
        env,
    )

    # A million additions before the mark (beside the interpreter's start), three after.
    million = before - idle
    assert million > 10_000_000  # Tens of instructions each.
    assert 2 < after / million < 4
    with pytest.raises(RuntimeError, match="failed under valgrind"):
        count_instructions(valgrind, [sys.executable, "-c", "raise SystemExit(3)"], env)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_each_counted_side_takes_its_runs_to_their_end(tmp_path, django_user_model):
    owner = django_user_model.objects.create_user("counted")
    ours = [
        agent_session_create(user=owner, agent_type=agents.INSTANT_WAITER_AGENT_TYPE).session_id
        for _ in range(2)
    ]
    with (
        own_queue("test-counted") as queue,  # The starts' step tasks; no worker reads it.
        connect(connection.settings_dict, like_django=False) as raw,
        FloorTables(raw) as floor,
    ):
        env = live_env(tmp_path, CELERY_TASK_DEFAULT_QUEUE=queue, HELIX_AGENTS="bench.agents")
        theirs = floor.new_sessions(2)
        for side, session_ids in (("ours", ours), ("floor", theirs)):
            listed = tmp_path / side
            listed.write_text("\n".join(session_ids))
            done = subprocess.run(
                [sys.executable, "-m", "bench.counted", side, str(owner.pk), str(listed)],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, done.stderr
        assert sorted(floor.ended_among(theirs)) == sorted(theirs)
    # The starts' tasks went with their queue.
    with current_app.connection_for_write() as broker, pytest.raises(broker.channel_errors):
        broker.default_channel.queue_declare(queue, passive=True)

    runs = Run.objects.filter(session_id__in=ours)
    assert sorted((run.status, run.step_count) for run in runs) == [("completed", 3)] * 2
