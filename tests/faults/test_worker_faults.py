"""Faults in the workers and the database under real Celery workers, PostgreSQL and Redis
(DESIGN invariants 1, 3 and 4): what runs survives workers killed at every phase of a step,
zombie workers, connections terminated inside the commit, and a step that always kills its
worker, with nothing lost, repeated or half-written.

Workers run as in production: many steps at once in a threads pool, so a kill takes every step
in flight in that process with it. The kill and termination tests run on both brokers: this
run's Redis, and RabbitMQ. A supervisor starts a dead worker again, the broker hands
its unacknowledged steps to the others after the visibility timeout, and the recovery sweep
enqueues again any the broker lost (a restored message acknowledged by its first worker is
gone from Redis's unacknowledged set, so a second kill loses it). The faults are
injected inside the worker by `tests.faults.fault_agents`, chosen per session by its `fault`
metadata. Every run is compared with a clean run of the same script.
"""

import itertools
import random
import time
from pathlib import Path

import kombu
import pytest

from agents_app.runs import services
from agents_app.runtime.tool_calls import CUT_OFF
from sessions_app.stores import get_session_store
from sessions_app.stores.types import MessageRole, SessionStatus, StagedChangeStatus
from sessions_app.usage import get_usage_store
from tests.agents_app.worker import Supervisor, Worker, sending_to
from tests.faults import fault_agents
from tests.faults.transcripts import TOOL_CHUNKS, transcript, wait_until_finished
from tests.services import RABBITMQ_URL, require

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("backends")]

# Each kill takes every step in flight in its worker: the bystanders' runs are struck too.
KILLS, BYSTANDERS, ZOMBIES, TERMINATIONS, STRANDED = 30, 70, 20, 100, 10
SUPERVISED_WORKERS = 3
PHASES = ("before_model", "streaming", "tool", "commit", "after_commit")


@pytest.fixture
def fault_dir(tmp_path) -> Path:
    path = tmp_path / "faults"
    path.mkdir()
    return path


def faulty_worker(tmp_path, fault_dir, **options) -> Worker:
    return Worker(tmp_path, **faulty_options(fault_dir, **options))


def faulty_options(fault_dir, **options) -> dict:
    return {
        "HELIX_AGENTS": "agents_app.demo,tests.faults.fault_agents",
        "HELIX_FAULT_DIR": str(fault_dir),
        "STEP_LEASE_SECONDS": "1",
        "CELERY_VISIBILITY_TIMEOUT": "2",
        "INTERRUPT_POLL_SECONDS": "0.1",
        "STEP_ERROR_BACKOFF_SECONDS": "0.05",
        # The recovery sweep finds what the broker lost with a killed worker within seconds;
        # a run only waiting in the queue meanwhile gets a duplicate task, which must be safe.
        "HELIX_STALLED_RUN_SECONDS": "3",
        "HELIX_RECOVERY_INTERVAL_SECONDS": "1",
        "HELIX_RUN_MAX_RECOVERIES": "1000",
        **options,
    }


@pytest.fixture(params=["redis", "rabbitmq"])
def workers(request, tmp_path, fault_dir):
    """Supervised workers on one queue, each running steps in a threads pool, on this run's
    Redis broker or on RabbitMQ (which gives a dead worker's steps back at once).

    Thirty kills in a minute strike bystanders too, and RabbitMQ hands their steps straight to
    the next worker, which may be struck next: a run may see more attempts die in a row than
    the poison-step bound allows (tested on its own below) without being to blame.
    """
    options = faulty_options(fault_dir, STEP_MAX_ABANDONED="20")
    if request.param == "redis":
        with Supervisor(tmp_path, SUPERVISED_WORKERS, **options) as supervised:
            yield supervised
        return
    require("rabbitmq")
    options["CELERY_BROKER_URL"] = RABBITMQ_URL
    supervisor = Supervisor(tmp_path, SUPERVISED_WORKERS, **options)
    try:
        with sending_to(RABBITMQ_URL), supervisor:
            yield supervisor
    finally:  # Once every worker has stopped: a worker started meanwhile would find no queue.
        with kombu.Connection(RABBITMQ_URL) as connection:
            connection.default_channel.queue_delete(supervisor.workers[0].queue)


def start(owner, fault: str, agent_type: str = fault_agents.AGENT.name) -> str:
    metadata = {"fault": fault} if fault else None
    return services.agent_start(
        user=owner, agent_type=agent_type, message="Go.", metadata=metadata
    ).session_id


def effects(fault_dir: Path) -> list[str]:
    log = fault_dir / "effects.log"
    return log.read_text().split() if log.exists() else []


def call_ids(session_id: str) -> list[str]:
    messages = get_session_store().get_messages(session_id, limit=1000).messages
    return [call["id"] for m in messages for call in m.tool_calls]


def problems_of(session_id: str, expected, done: list[str], *, cut_off_allowed: bool) -> list:
    """Return what is wrong with a run that should match the clean `expected` one."""
    store, found = get_session_store(), []
    state = store.load_state(session_id)
    if state.status != SessionStatus.COMPLETED:
        found.append(f"status {state.status}: {state.error}")
    messages = store.get_messages(session_id, limit=1000).messages
    if [m.sequence for m in messages] != list(range(1, len(messages) + 1)):
        found.append("message sequences are not 1..n")
    ran = {call: done.count(call) for call in call_ids(session_id)}
    if any(count > 1 for count in ran.values()):
        found.append(f"a tool ran twice: {ran}")
    messages_now, log_now = transcript(session_id)
    results = {m.tool_call_id: m.content for m in messages if m.role == MessageRole.TOOL}
    if cut_off_allowed and any(CUT_OFF in result for result in results.values()):
        # A call running when its worker died (and any beside it) says it was cut off.
        if any(CUT_OFF not in results[call] and count != 1 for call, count in ran.items()):
            found.append(f"a call reported done did not run exactly once: {ran}")
        kept = [m for m in messages_now if m[0] != MessageRole.TOOL]
        if kept != [m for m in expected[0] if m[0] != MessageRole.TOOL]:
            found.append("messages differ from a clean run")
        log_now = [c for c in log_now if c["type"] not in TOOL_CHUNKS]
        if log_now != [c for c in expected[1] if c["type"] not in TOOL_CHUNKS]:
            found.append("stream log differs from a clean run")
        return found
    if set(ran.values()) != {1}:
        found.append(f"a tool did not run exactly once: {ran}")
    if messages_now != expected[0]:
        found.append("messages differ from a clean run")
    if log_now != expected[1]:
        found.append("stream log differs from a clean run")
    if sorted(state.custom_state.get("effects", [])) != ["a", "b"]:
        found.append(f"state {state.custom_state}")
    if [e.step_count for e in get_usage_store().get_entries(session_id, kinds=["tokens"])] != [
        1,
        2,
    ]:
        found.append("token usage not recorded once per step")
    if store.get_staged_changes(session_id, status=StagedChangeStatus.STAGED):
        found.append("staged changes left unpromoted")
    return found


def clean_run(owner) -> str:
    """Run the script without a fault; return the session."""
    session_id = start(owner, fault="")
    wait_until_finished([session_id], timeout=60)
    return session_id


def report(figure, outcomes: dict[str, list], what: str) -> None:
    """Record the pass figure, then fail with the first problems if any run had one."""
    passed = sum(not problems for problems in outcomes.values())
    figure(passed, len(outcomes), what)
    failing = {session: problems for session, problems in outcomes.items() if problems}
    assert not failing, dict(itertools.islice(failing.items(), 5))


def test_workers_killed_at_every_phase_of_a_step_lose_and_repeat_nothing(
    workers, owner, fault_dir, figure
):
    expected = transcript(clean_run(owner))
    rng = random.Random(20261124)
    plans = [
        f"kill:{phase}@{1 if phase == 'tool' else rng.choice((1, 2))}"
        for phase in itertools.islice(itertools.cycle(PHASES), KILLS)
    ] + [""] * BYSTANDERS
    rng.shuffle(plans)
    sessions = {start(owner, plan): plan for plan in plans}

    wait_until_finished(list(sessions), timeout=300)

    struck = {path.name.removeprefix("struck-"): path for path in fault_dir.glob("struck-*")}
    missed = {plan for session, plan in sessions.items() if plan and session not in struck}
    # Every planned kill happened, but where another kill struck first and left no second
    # chance: a tool cut off is not run again, and a task taken down after its commit may be
    # the run's last.
    assert all(plan.startswith(("kill:tool", "kill:after_commit")) for plan in missed), missed
    assert len(struck) >= KILLS * 0.9
    # Each kill took its worker down, with every step in it (two may strike one worker at once).
    assert workers.restarts >= len(struck) // 2
    done = effects(fault_dir)
    resumed = sorted(finished_after(session, path) for session, path in struck.items())
    median = resumed[len(resumed) // 2]
    report(
        figure,
        {
            session: problems_of(session, expected, done, cut_off_allowed=True)
            for session in sessions
        },
        f"runs completed, nothing lost or repeated, under {workers.restarts} worker kills each "
        f"taking every step in flight in its worker; a killed run finished {median:.1f} s "
        f"after its kill at the median, {resumed[-1]:.1f} s at most",
    )


def test_a_worker_killed_between_a_steps_commit_and_its_enqueue_strands_no_run(
    tmp_path, owner, fault_dir, figure
):
    # Each step hands the next to the broker (no time slice), so every run has such a moment.
    options = faulty_options(fault_dir, STEP_TIME_SLICE_SECONDS="0")
    with Supervisor(tmp_path, SUPERVISED_WORKERS, **options) as workers:
        expected = transcript(clean_run(owner))
        sessions = [start(owner, "kill:before_enqueue@1") for _ in range(STRANDED)]
        wait_until_finished(sessions, timeout=120)
        recovered = workers.read_logs().count("enqueued again")

    struck = list(fault_dir.glob("struck-*"))
    assert struck, "no worker died between a commit and an enqueue"
    assert recovered > 0, "no run was recovered by the sweep"
    done = effects(fault_dir)
    report(
        figure,
        {s: problems_of(s, expected, done, cut_off_allowed=True) for s in sessions},
        f"runs completed after {len(struck)} workers died between step 1's commit and the "
        f"enqueue of step 2; {recovered} recovered by the sweep",
    )


def finished_after(session_id: str, struck: Path) -> float:
    """Return the seconds from the kill the `struck` marker records to the run's end."""
    completed_at = get_session_store().get_current_run(session_id).completed_at
    return completed_at.timestamp() - struck.stat().st_mtime


def test_a_zombie_worker_never_commits(tmp_path, owner, fault_dir, figure):
    frozen = faulty_worker(tmp_path, fault_dir).start()
    clean = clean_run(owner)
    frozen.stop()
    expected, checkpoints = transcript(clean), len(get_session_store().list_checkpoints(clean))
    frozen = faulty_worker(tmp_path, fault_dir, concurrency=ZOMBIES, pool="threads")
    frozen.start()
    successor = faulty_worker(tmp_path, fault_dir, concurrency=4)
    successor.queue = frozen.queue
    successor.env["CELERY_TASK_DEFAULT_QUEUE"] = frozen.queue
    try:
        sessions = [start(owner, "zombie@1") for _ in range(ZOMBIES)]
        deadline = time.monotonic() + 60
        while len(list(fault_dir.glob("ready-*"))) < ZOMBIES:  # All about to commit.
            assert time.monotonic() < deadline, "the attempts did not all reach their commit"
            time.sleep(0.05)
        frozen.pause()
        (fault_dir / "go").touch()
        successor.start()
        wait_until_finished(sessions, timeout=120)
        committed = {session: transcript(session) for session in sessions}
        frozen.resume()
        wait_for_log(frozen, "was taken over by another worker and did not commit", ZOMBIES)

        done = effects(fault_dir)
        outcomes = {}
        for session in sessions:
            problems = problems_of(session, expected, done, cut_off_allowed=False)
            if transcript(session) != committed[session]:
                problems.append("the zombie changed what was committed")
            if len(get_session_store().list_checkpoints(session)) != checkpoints:
                problems.append("a checkpoint too many")
            outcomes[session] = problems
        report(figure, outcomes, "zombie commits rejected, nothing of them stored")
    finally:
        frozen.stop()
        successor.stop()


def wait_for_log(worker: Worker, line: str, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while worker.read_log().count(line) < count:
        assert time.monotonic() < deadline, f"{worker.read_log().count(line)} of {count}: {line}"
        time.sleep(0.1)


def test_connections_terminated_inside_the_commit_leave_no_partial_state(
    workers, owner, fault_dir, figure
):
    expected = transcript(clean_run(owner))
    counted = [start(owner, f"count@{step}") for step in (1, 2)]
    wait_until_finished(counted, timeout=60)
    statements = {
        step: int((fault_dir / f"statements-{session}-{step}").read_text())
        for step, session in zip((1, 2), counted, strict=True)
    }
    points = [(n, step) for step in (1, 2) for n in range(1, statements[step] + 1)]
    plans = [
        f"terminate:{n}@{step}"
        for n, step in itertools.islice(itertools.cycle(points), TERMINATIONS)
    ]
    sessions = [start(owner, plan) for plan in plans]

    wait_until_finished(sessions, timeout=300)

    struck = {path.name.removeprefix("struck-") for path in fault_dir.glob("struck-*")}
    assert struck == set(sessions)
    assert workers.restarts == 0  # The workers recovered without a restart.
    done = effects(fault_dir)
    report(
        figure,
        {s: problems_of(s, expected, done, cut_off_allowed=False) for s in sessions},
        f"connections terminated at each of {len(points)} commit statements, no partial state",
    )


def test_a_step_that_always_kills_its_worker_fails_its_run_after_bounded_deliveries(
    tmp_path, owner, fault_dir, figure
):
    with Supervisor(tmp_path, 1, **faulty_options(fault_dir, STEP_MAX_ABANDONED="2")):
        session_id = start(owner, "", agent_type=fault_agents.POISON.name)
        wait_until_finished([session_id], timeout=60)
        attempts = (fault_dir / "poison.log").read_text().split()
        time.sleep(3)  # Time for a redelivery loop to show itself, were there one.
        after = (fault_dir / "poison.log").read_text().split()

    state = get_session_store().load_state(session_id)
    bounded = state.status == SessionStatus.FAILED and len(after) == len(attempts) == 3
    figure(int(bounded), 1, f"poison step failed its run after {len(after)} deliveries")
    assert (state.status, state.failure_reason) == (SessionStatus.FAILED, "step_abandoned")
    assert "left unfinished by 3 attempts" in state.error
    assert after == attempts == [session_id] * 3
