"""No tool call runs twice (DESIGN invariant 4): an attempt that takes over a step whose worker
died replays the calls that finished and reports the one that was running as cut off. A call of
an idempotent tool keeps no records and runs again.

Steps run in this process (`executor.run_step`, as the task calls it); an attempt "dies" by
raising a `BaseException` out of the step, which leaves its lease unreleased as a crash does.
"""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from pydantic import BaseModel

from agents_app.definitions.agent import Agent, Tool
from agents_app.definitions.registry import get_registry
from agents_app.llm.scripted import ScriptedToolCall, Turn, register_script, sequence_script
from agents_app.runs import services
from agents_app.runtime import attempt, executor
from agents_app.runtime.tool_calls import CUT_OFF
from sessions_app.models import ToolCallRecord
from sessions_app.stores import get_session_store
from sessions_app.stores.types import MessageRole, SessionStatus
from sessions_app.usage import get_usage_store
from streams_app.backends import get_stream_manager

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("private_queue")]

EFFECTS: list[str] = []  # Each run of the tool: its call id, as a payment provider would see.


class Crash(BaseException):
    """The worker dies here."""


class Payment(BaseModel):
    amount: int


def pay(payment: Payment, ctx) -> dict:
    EFFECTS.append(ctx.tool_call_id)
    ctx.state.append("paid", payment.amount)
    ctx.emit({"paid": payment.amount}, name="payment")
    ctx.record_usage("payments", "amount", payment.amount)
    if payment.amount < 0:
        raise Crash("the worker died inside the tool")
    return {"paid": payment.amount}


def payer(amount: int, *, idempotent: bool = False) -> str:
    """Register (once) an agent that pays `amount`, then says it is done; return its type."""
    name = f"payer{amount}{'_again' if idempotent else ''}".replace("-", "_")
    if not get_registry().has(name):
        tool = Tool(
            name="pay", description="Pay.", input_model=Payment, execute=pay, idempotent=idempotent
        )
        get_registry().register(Agent(name=name, tools=[tool], initial_state={}))
        register_script(
            name,
            sequence_script(
                Turn(tool_calls=[ScriptedToolCall(name="pay", arguments={"amount": amount})]),
                Turn(text="Done."),
            ),
        )
    return name


@pytest.fixture(autouse=True)
def _no_effects():
    EFFECTS.clear()


def start(owner, amount: int, *, idempotent: bool = False) -> tuple[str, str]:
    agent_type = payer(amount, idempotent=idempotent)
    started = services.agent_start(user=owner, agent_type=agent_type, message="Pay.")
    return started.session_id, started.run_id


def die_then_take_over(session_id: str, run_id: str):
    """Let step 1's attempt die, run the run to its end as the next worker would, and return
    the session, checking that the tool ran once across both attempts."""
    with pytest.raises(Crash):
        executor.run_step(session_id, run_id, 1, holder="first-worker")
    assert len(EFFECTS) == 1
    executor.run_steps(session_id, run_id, 1, time_slice=60)  # One task, to the run's end.
    state = get_session_store().load_state(session_id)
    assert state.status == SessionStatus.COMPLETED
    assert len(EFFECTS) == 1
    return state


def tool_results(session_id: str) -> list[str]:
    messages = get_session_store().get_messages(session_id, limit=100).messages
    return [m.content for m in messages if m.role == MessageRole.TOOL]


def custom_chunks(session_id: str) -> list[dict]:
    stream_id = get_session_store().load_state(session_id).stream_id
    return [
        c.chunk["data"]
        for c in get_stream_manager().get_all_chunks(stream_id)
        if c.chunk["type"] == "custom"
    ]


def die_before_the_commit_once(monkeypatch) -> None:
    """Let the next step attempt die after its tools ran, before its commit."""
    finish_step = attempt.Attempt._finish_step

    def die_before_the_commit(self, *args):
        monkeypatch.setattr(attempt.Attempt, "_finish_step", finish_step)
        raise Crash("the worker died after its tools ran")

    monkeypatch.setattr(attempt.Attempt, "_finish_step", die_before_the_commit)


def test_a_call_that_finished_before_its_worker_died_is_replayed_not_run_again(owner, monkeypatch):
    session_id, run_id = start(owner, 5)
    die_before_the_commit_once(monkeypatch)

    state = die_then_take_over(session_id, run_id)

    assert state.custom_state == {"paid": [5]}
    assert tool_results(session_id) == ['{"paid": 5}']
    assert custom_chunks(session_id) == [{"paid": 5}]  # The dead attempt's chunk went.
    [metric] = get_usage_store().get_entries(session_id, kinds=["custom"])
    assert (metric.name, metric.value) == ("amount", 5)
    assert get_session_store().get_tool_calls(session_id, f"{run_id}:1") == {}


def test_a_call_running_when_its_worker_died_is_cut_off_not_run_again(owner):
    session_id, run_id = start(owner, -1)

    state = die_then_take_over(session_id, run_id)

    assert state.custom_state == {}  # Its writes died with it.
    [result] = tool_results(session_id)
    assert CUT_OFF in result
    assert custom_chunks(session_id) == []


def test_an_idempotent_call_keeps_no_record_and_runs_again_after_its_worker_died(
    owner, monkeypatch
):
    session_id, run_id = start(owner, 7, idempotent=True)
    die_before_the_commit_once(monkeypatch)

    with pytest.raises(Crash):
        executor.run_step(session_id, run_id, 1, holder="first-worker")
    assert len(EFFECTS) == 1
    assert get_session_store().get_tool_calls(session_id, f"{run_id}:1") == {}
    executor.run_steps(session_id, run_id, 1, time_slice=60)  # One task, to the run's end.

    assert len(EFFECTS) == 2  # Run again: the dead attempt's writes died with it.
    assert get_session_store().load_state(session_id).custom_state == {"paid": [7]}
    assert tool_results(session_id) == ['{"paid": 7}']
    assert custom_chunks(session_id) == [{"paid": 7}]
    [metric] = get_usage_store().get_entries(session_id, kinds=["custom"])
    assert (metric.name, metric.value) == ("amount", 7)


def test_a_step_with_idempotent_calls_writes_no_tool_call_records(owner):
    session_id, run_id = start(owner, 3, idempotent=True)
    record_table = ToolCallRecord._meta.db_table

    with CaptureQueriesContext(connection) as queries:
        executor.run_steps(session_id, run_id, 1, time_slice=60)  # One task, to the run's end.

    assert len(EFFECTS) == 1
    assert [q["sql"] for q in queries.captured_queries if record_table in q["sql"]] == []
    assert get_session_store().load_state(session_id).status == SessionStatus.COMPLETED
