"""The agent the fault suite runs, and the faults it injects inside the worker that runs it.

The worker imports this module through `HELIX_AGENTS`. A session's `fault` metadata names what
befalls it, once (a marker file in `HELIX_FAULT_DIR` says it happened):

- `kill:<phase>@<step>`: the worker process running step <step> kills itself (and every step
  in flight in it) with SIGKILL at <phase>: `before_model`, `streaming` (after two text
  deltas), `tool` (inside a tool, after its side effect), `commit` (inside the step commit's
  transaction, after three statements), `before_enqueue` (the task committed the step and
  released its run's lease to hand the next step to the broker, and dies before it sends it:
  nothing but the recovery sweep moves the run on) or `after_commit` (the task that committed
  the step returned, its message not yet acknowledged);
- `terminate:<n>@<step>`: PostgreSQL terminates the process's connection just before the
  <n>th statement of step <step>'s commit (`pg_terminate_backend`), as a failover would;
- `count@<step>`: nothing befalls it; the statements of step <step>'s commit are counted into
  `statements-<session id>-<step>`, so the suite knows where it can strike;
- `zombie@<step>`: just before step <step> commits, the attempt says so (`ready-<session id>`)
  and waits for the file `go`, so the suite can freeze its worker there.

The agent, `faulty`, streams some words and calls its `effect` tool twice in step 1; each call
appends its id to `effects.log` (a side effect the suite counts); step 2 answers and ends.
The agent `poison`'s model kills the worker whenever it is called, after noting the call in
`poison.log`.
"""

import functools
import os
import signal
import time
from pathlib import Path

from celery.signals import task_postrun
from django.db import connection
from pydantic import BaseModel

from agents_app.definitions.agent import Agent, Tool
from agents_app.definitions.registry import get_registry
from agents_app.llm.scripted import ScriptedToolCall, Turn, register_script, sequence_script
from agents_app.runtime import attempt, executor
from sessions_app.stores import get_session_store
from streams_app import chunks
from streams_app.models import StreamChunk
from tests.cut_connections import cut_own_connection

FAULT_DIR = Path(os.environ.get("HELIX_FAULT_DIR", "/nonexistent"))
STREAMED_DELTAS_BEFORE_KILL = 2
COMMIT_STATEMENTS_BEFORE_KILL = 3
CHUNK_TABLE = StreamChunk._meta.db_table


class Effect(BaseModel):
    label: str


def effect(order: Effect, ctx) -> dict:
    with (FAULT_DIR / "effects.log").open("a") as log:
        log.write(f"{ctx.tool_call_id}\n")
    ctx.state.append("effects", order.label)
    ctx.emit({"effect": order.label}, name="effect")
    if _strikes(ctx.session_id, "kill:tool", ctx.step):
        _die()
    return {"done": order.label}


AGENT = Agent(
    name="faulty",
    tools=[Tool(name="effect", description="Have an effect.", input_model=Effect, execute=effect)],
    initial_state={},
)
SCRIPT = sequence_script(
    Turn(
        text=" ".join(f"one{n}" for n in range(12)),
        tool_calls=[
            ScriptedToolCall(name="effect", arguments={"label": "a"}),
            ScriptedToolCall(name="effect", arguments={"label": "b"}),
        ],
    ),
    Turn(text=" ".join(f"two{n}" for n in range(12))),
)


def poison_script(request, context) -> Turn:
    with (FAULT_DIR / "poison.log").open("a") as log:
        log.write(f"{context.session_id}\n")
    _die()


POISON = Agent(name="poison")


@functools.cache
def _fault(session_id: str) -> str:
    state = get_session_store().load_state(session_id)
    return "" if state is None else state.metadata.get("fault", "")


def _strikes(session_id: str, fault: str, step: int) -> bool:
    """Return whether `fault` is due at `step` of the session now, marking it done if so."""
    if _fault(session_id) != f"{fault}@{step}":
        return False
    try:
        os.close(os.open(FAULT_DIR / f"struck-{session_id}", os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    return True


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _before_model(call_model):
    @functools.wraps(call_model)
    def wrapper(self, *args, **kwargs):
        if _strikes(self.session_id, "kill:before_model", self.step):
            _die()
        return call_model(self, *args, **kwargs)

    return wrapper


def _streaming(make_chunk):
    @functools.wraps(make_chunk)
    def wrapper(self, chunk_type, **fields):
        if chunk_type is chunks.TextDelta:
            self.fault_deltas = getattr(self, "fault_deltas", 0) + 1
            if self.fault_deltas > STREAMED_DELTAS_BEFORE_KILL and _strikes(
                self.session_id, "kill:streaming", self.step
            ):
                _die()
        return make_chunk(self, chunk_type, **fields)

    return wrapper


def _in_commit(finish_step):
    """Strike inside the commit of a step that finishes (its transaction, start to end)."""

    @functools.wraps(finish_step)
    def wrapper(self, *args, **kwargs):
        if _strikes(self.session_id, "zombie", self.step):
            (FAULT_DIR / f"ready-{self.session_id}").touch()
            while not (FAULT_DIR / "go").exists():
                time.sleep(0.05)
        fault = _fault(self.session_id)
        if not fault.startswith(("kill:commit@", "terminate:", "count@")):
            return finish_step(self, *args, **kwargs)
        seen = 0

        def statement(execute, sql, params, many, context):
            nonlocal seen
            # Not counted: chunks stored before the transaction began, and the queued ones that
            # open it when the flusher has not stored them yet (which depends on its timing).
            if not connection.in_atomic_block or (seen == 0 and CHUNK_TABLE in sql):
                return execute(sql, params, many, context)
            seen += 1
            if (
                fault == f"kill:commit@{self.step}"
                and seen > COMMIT_STATEMENTS_BEFORE_KILL
                and _strikes(self.session_id, "kill:commit", self.step)
            ):
                _die()
            if fault.startswith(f"terminate:{seen}@") and _strikes(
                self.session_id, f"terminate:{seen}", self.step
            ):
                cut_own_connection()
            return execute(sql, params, many, context)

        with connection.execute_wrapper(statement):
            outcome = finish_step(self, *args, **kwargs)
        if fault == f"count@{self.step}":
            (FAULT_DIR / f"statements-{self.session_id}-{self.step}").write_text(str(seen))
        return outcome

    return wrapper


def _before_enqueue(hand_over):
    @functools.wraps(hand_over)
    def wrapper(session_id, holder):
        hand_over(session_id, holder)
        state = get_session_store().load_state(session_id)
        if state is not None and any(
            _strikes(session_id, "kill:before_enqueue", step)
            for step in range(1, state.step_count + 1)
        ):
            _die()

    return wrapper


def _after_commit(sender=None, args=None, kwargs=None, **_):
    if sender is None or sender.name != "agents_app.tasks.run_step_task":
        return
    session_id = (*args, *kwargs.values())[0]
    state = get_session_store().load_state(session_id)
    # A task may run several steps of its run: strike once it has committed the planned one.
    if state is not None and any(
        _strikes(session_id, "kill:after_commit", step) for step in range(1, state.step_count + 1)
    ):
        _die()


for agent, script in ((AGENT, SCRIPT), (POISON, poison_script)):
    if not get_registry().has(agent.name):
        get_registry().register(agent)
        register_script(agent.name, script)
if "HELIX_FAULT_DIR" in os.environ and not hasattr(attempt.Attempt, "faults_injected"):
    attempt.Attempt.faults_injected = True  # The worker's own classes, patched once.
    attempt.Attempt._call_model = _before_model(attempt.Attempt._call_model)
    attempt.Attempt._chunk = _streaming(attempt.Attempt._chunk)
    attempt.Attempt._finish_step = _in_commit(attempt.Attempt._finish_step)
    executor.hand_over = _before_enqueue(executor.hand_over)
    task_postrun.connect(_after_commit, weak=False)
