"""Agents the runtime tests drive, each with a script for the offline model.

The worker subprocesses import this module too (`HELIX_AGENTS`), so every script must be
deterministic per request: what a step does may not depend on process-local history, except
where a test needs it (the flaky model counts its calls per run in the worker process).
"""

import collections
import dataclasses
import time
from types import SimpleNamespace

from pydantic import BaseModel

from agents_app.definitions.agent import Agent, Tool, sub_agent_tool
from agents_app.definitions.hooks import AgentHooks, CompleteContext
from agents_app.definitions.memory import AgentMemory, CompactionSettings
from agents_app.definitions.registry import get_registry
from agents_app.llm.base import LLMError
from agents_app.llm.scripted import (
    ScriptedToolCall,
    Turn,
    register_script,
    sequence_script,
    turn_step,
)
from sessions_app.memory.context import ContextBlockSpec
from sessions_app.memory.providers import DatabaseSearchProvider
from sessions_app.stores import get_session_store
from sessions_app.stores.types import MessageRole
from sessions_app.usage import get_usage_store
from sessions_app.usage.types import CustomEntry

LONG_TEXT = " ".join(f"word{n}" for n in range(300))


class Note(BaseModel):
    text: str


def take_note(note: Note, ctx) -> dict:
    ctx.state.append("notes", note.text)
    ctx.emit({"noted": note.text}, name="note")
    ctx.record_usage("notes", "characters", len(note.text))
    return {"noted": note.text}


def explode(note: Note, ctx) -> dict:
    raise RuntimeError(f"cannot handle {note.text}")


class Nap(BaseModel):
    seconds: float


def sleep(nap: Nap, ctx) -> dict:
    time.sleep(nap.seconds)  # Blocks its thread, as sync I/O in a tool would.
    return {"slept": nap.seconds}


SLOW_REPLY_SECONDS, SLOW_REPLY_DELTAS = 5.0, 5
SLOW_REPLY = " ".join(f"slow{n}" for n in range(SLOW_REPLY_DELTAS * 3))

note_tool = Tool(name="note", description="Take a note.", input_model=Note, execute=take_note)
sleep_tool = Tool(name="sleep", description="Sleep a while.", input_model=Nap, execute=sleep)
broken_tool = Tool(name="explode", description="Always fails.", input_model=Note, execute=explode)


class FilePath(BaseModel):
    path: str


def read_binary(file: FilePath, ctx) -> dict:
    read = f"{file.path}: bin\x00ary \ud800"  # A binary file read as text.
    ctx.state.set("last", read)
    ctx.state.append("all", read)
    ctx.emit({"read": read}, name="file")
    return {"read": read}


binary_tool = Tool(
    name="read_file", description="Read a file.", input_model=FilePath, execute=read_binary
)


class Question(BaseModel):
    text: str


class Transfer(BaseModel):
    amount: int


def transfer(order: Transfer, ctx) -> dict:
    ctx.state.append("transfers", order.amount)
    return {"sent": order.amount}


ask_tool = Tool(name="ask_user", description="Ask the user.", input_model=Question, client=True)
transfer_tool = Tool(
    name="transfer",
    description="Send money; a person approves each transfer.",
    input_model=Transfer,
    execute=transfer,
    needs_approval=True,
)


def held_calls_script(*calls: ScriptedToolCall, delay: float = 0.0):
    """Call `calls` at a turn's start; then answer with the tool results it got, in order.

    `delay` is the pause before each piece of the answer.
    """

    def script(request, context) -> Turn:
        if turn_step(request) == 0:
            return Turn(tool_calls=list(calls))
        results = [m.content for m in request.messages if m.role == MessageRole.TOOL]
        return Turn(text="Results: " + " | ".join(results), delay=delay)

    return script


class Topic(BaseModel):
    topic: str


def analyse_script(request, context) -> Turn:
    """Answer with what was asked, slowly enough to be seen running."""
    asked = [m.content for m in request.messages if m.role == MessageRole.USER][-1]
    return Turn(text=f"Analysed {asked}", delay=0.05)


def failing_script(request, context) -> Turn:
    return Turn(error=LLMError("the model refuses", retryable=False))


analyst_tool = sub_agent_tool("analyst", Topic, description="Analyse a topic.")
orchestrator_tool = sub_agent_tool("orchestrator", Topic, description="Run two analyses.")


def count_script(request, context) -> Turn:
    """Say how many messages the model was sent."""
    return Turn(text=f"Seen {len(request.messages)} messages")


def critic_script(request, context) -> Turn:
    """Answer the last message, saying how many messages came before it (its memory)."""
    users = [m.content for m in request.messages if m.role == MessageRole.USER]
    return Turn(text=f"On {users[-1]} (heard {len(users) - 1} before)", delay=0.5)


def companion_call(tool: str, call_id: str, **arguments) -> ScriptedToolCall:
    return ScriptedToolCall(name=f"companion__{tool}", arguments=arguments, id=call_id)


def steps_script(*steps: list[ScriptedToolCall]):
    """Make the calls of step i at step i; then answer with every tool result, in order."""

    def script(request, context) -> Turn:
        step = turn_step(request)
        if step < len(steps):
            return Turn(tool_calls=steps[step])
        results = [m.content for m in request.messages if m.role == MessageRole.TOOL]
        return Turn(text="Results: " + " | ".join(results))

    return script


_calls_per_run: collections.Counter[str] = collections.Counter()


def flaky_script(request, context) -> Turn:
    """Fail with a retryable error on the first two calls of each run, then answer."""
    _calls_per_run[context.run_id] += 1
    if _calls_per_run[context.run_id] <= 2:
        return Turn(text="partial", error=LLMError("overloaded", retryable=True))
    return Turn(text="Recovered.")


def count_completion(context: CompleteContext) -> None:
    """Record each run's end as a custom usage metric the test process can read."""
    get_usage_store().record_entry(
        CustomEntry(
            session_id=context.session_id,
            run_id=context.run_id,
            metric_type="on_complete",
            name=context.status,
            value=1,
        )
    )


def memorizer_script(request, context) -> Turn:
    """Summarise when asked to; save a "Remember: ..." with set_context; else echo the prompt."""
    last = request.messages[-1]
    if last.content.startswith(("Create a concise summary", "You are updating")):
        return Turn(text="## Topic\nWhat the user told me.\x00")  # With what no database stores.
    if last.role == MessageRole.USER and last.content.startswith("Remember: "):
        fact = last.content.removeprefix("Remember: ")
        call = ScriptedToolCall(name="set_context", arguments={"label": "memory", "content": fact})
        return Turn(tool_calls=[call])
    return Turn(text=f"Prompt: {request.system}")


def failing_summary_script(request, context) -> Turn:
    """Answer every message, but fail to summarise."""
    if request.messages[-1].content.startswith("Create a concise summary"):
        return Turn(error=LLMError("summaries are down", retryable=False))
    return Turn(text=f"Seen {len(request.messages)} messages")


MEMORY_BLOCK = ContextBlockSpec("memory", description="Learned facts", max_tokens=1100)


def rewrite_first_message(note: Note, ctx) -> dict:
    """Rewrite the session's first message, as a person editing it meanwhile would."""
    store = get_session_store()
    first = store.get_messages(ctx.session_id, limit=1).messages[0]
    store.update_message(ctx.session_id, dataclasses.replace(first, content=note.text))
    return {"rewrote": note.text}


rewrite_tool = Tool(
    name="rewrite",
    description="Rewrite the first message.",
    input_model=Note,
    execute=rewrite_first_message,
)
# The messages each step's model request held, per session, in this process.
REQUESTS_SEEN: dict[str, list[list]] = collections.defaultdict(list)


def recording_script(tool_name: str):
    """Return a script of three steps, calling `tool_name` in the first two, that records the
    messages each request held."""

    def script(request, context) -> Turn:
        REQUESTS_SEEN[context.session_id].append(list(request.messages))
        step = turn_step(request)
        if step == 2:
            return Turn(text="Done.")
        call = ScriptedToolCall(name=tool_name, arguments={"text": f"rewritten {step}"})
        return Turn(text=f"Step {step}.", tool_calls=[call])

    return script


def second_chance_script(request, context) -> Turn:
    """Fail for good in a session's first run; answer in any later one (a retry)."""
    if len(get_session_store().list_runs(context.session_id)) == 1:
        return Turn(error=LLMError("bad request", retryable=False))
    return Turn(text="Second time lucky.")


SCRIPTED_AGENTS = [
    # Three steps of a tool call each, their requests recorded; the rewriter's tool edits the
    # session's first message, as someone else might while its run goes on.
    (
        Agent(name="recorder", tools=[note_tool], initial_state={"notes": []}),
        recording_script("note"),
    ),
    (Agent(name="rewriter", tools=[rewrite_tool]), recording_script("rewrite")),
    # Two parallel notes, then a third, then an answer: three steps.
    (
        Agent(name="notetaker", tools=[note_tool], initial_state={"notes": []}),
        sequence_script(
            Turn(
                text="Noting two things.",
                tool_calls=[
                    ScriptedToolCall(name="note", arguments={"text": "first"}),
                    ScriptedToolCall(name="note", arguments={"text": "second"}),
                ],
            ),
            Turn(tool_calls=[ScriptedToolCall(name="note", arguments={"text": "third"})]),
            Turn(text="All noted."),
        ),
    ),
    # Streams a long answer slowly enough to be interrupted mid-stream.
    (Agent(name="talker"), sequence_script(Turn(text=LONG_TEXT, delay=0.02))),
    # A tool that raises, then an answer that reads the error.
    (
        Agent(name="clumsy", tools=[broken_tool]),
        sequence_script(
            Turn(tool_calls=[ScriptedToolCall(name="explode", arguments={"text": "this"})]),
            Turn(text="The tool failed; carrying on."),
        ),
    ),
    # A model and a tool that say what no database stores: a NUL, a surrogate without its pair.
    (
        Agent(name="garbler", tools=[binary_tool]),
        sequence_script(
            Turn(
                text="Odd\x00 bytes \ud800 here",
                tool_calls=[ScriptedToolCall(name="read_file", arguments={"path": "a\x00b"})],
            ),
            Turn(text="Read."),
        ),
    ),
    # A model server whose error says what no database stores.
    (
        Agent(name="mumbler"),
        sequence_script(Turn(error=LLMError("bad\x00 byte", retryable=False))),
    ),
    # Never stops calling tools: the run fails at its step limit.
    (
        Agent(name="looper", tools=[note_tool], max_steps=3),
        sequence_script(
            Turn(tool_calls=[ScriptedToolCall(name="note", arguments={"text": "again"})])
        ),
    ),
    # Three steps of slow text and parallel tools: a crash can land anywhere in them.
    (
        Agent(name="steady", tools=[note_tool], initial_state={"notes": []}),
        sequence_script(
            Turn(
                text=" ".join(f"one{n}" for n in range(30)),
                delay=0.01,
                tool_calls=[
                    ScriptedToolCall(name="note", arguments={"text": "a"}),
                    ScriptedToolCall(name="note", arguments={"text": "b"}),
                ],
            ),
            Turn(
                text=" ".join(f"two{n}" for n in range(30)),
                delay=0.01,
                tool_calls=[ScriptedToolCall(name="note", arguments={"text": "c"})],
            ),
            Turn(text=" ".join(f"three{n}" for n in range(30)), delay=0.01),
        ),
    ),
    (Agent(name="flaky"), flaky_script),
    # Sub-agents: two analysts in parallel, an orchestrator of them one level up, a child that
    # fails, one that outlives its timeout, and one slow enough to interrupt.
    (Agent(name="analyst"), analyse_script),
    (
        Agent(name="orchestrator", tools=[analyst_tool]),
        held_calls_script(
            ScriptedToolCall(name="analyst", arguments={"topic": "a"}, id="call-a"),
            ScriptedToolCall(name="analyst", arguments={"topic": "b"}, id="call-b"),
        ),
    ),
    (
        Agent(name="director", tools=[orchestrator_tool]),
        held_calls_script(
            ScriptedToolCall(name="orchestrator", arguments={"topic": "all"}, id="call-o")
        ),
    ),
    (Agent(name="refuser"), failing_script),
    (Agent(name="recounter"), count_script),
    # Persistent children: a critic consulted twice, then listed and looked at.
    (Agent(name="critic"), critic_script),
    (
        Agent(name="author", persistent_agents=("critic",)),
        steps_script(
            [companion_call("spawnAgent", "s1", agentType="critic", name="c", message="draft 1")],
            [companion_call("spawnAgent", "s2", agentType="critic", name="c", message="draft 2")],
            [
                companion_call("listChildren", "l1"),
                companion_call("getChildStatus", "g1", name="c"),
                companion_call("spawnAgent", "s3", agentType="talker", name="t", message="x"),
            ],
        ),
    ),
    # A child left to run, waited for, and one stopped while it talks.
    (Agent(name="droner"), sequence_script(Turn(text=LONG_TEXT, delay=0.1))),
    (
        Agent(name="manager", persistent_agents=("critic", "droner")),
        steps_script(
            [
                companion_call(
                    "spawnAgent",
                    "s1",
                    agentType="critic",
                    name="bg",
                    message="task",
                    blocking=False,
                )
            ],
            [
                companion_call(
                    "spawnAgent",
                    "s2",
                    agentType="droner",
                    name="chatty",
                    message="talk",
                    blocking=False,
                ),
                companion_call("waitForResult", "w1", name="bg"),
            ],
            [
                companion_call("terminateChild", "t1", name="chatty"),
                companion_call("sendMessage", "m1", name="nobody", message="hi"),
            ],
        ),
    ),
    (
        Agent(
            name="delegator",
            tools=[
                sub_agent_tool("refuser", Topic),
                sub_agent_tool("talker", Topic, timeout_seconds=1),
            ],
        ),
        held_calls_script(
            ScriptedToolCall(name="refuser", arguments={"topic": "x"}, id="call-r"),
            ScriptedToolCall(name="talker", arguments={"topic": "y"}, id="call-t"),
        ),
    ),
    (
        Agent(name="patient", tools=[sub_agent_tool("talker", Topic)]),
        held_calls_script(ScriptedToolCall(name="talker", arguments={"topic": "z"}, id="call-t")),
    ),
    # A note runs at once; a question for the client and a transfer to approve suspend the run.
    (
        Agent(name="asker", tools=[note_tool, ask_tool, transfer_tool], initial_state={}),
        held_calls_script(
            ScriptedToolCall(name="note", arguments={"text": "before"}, id="call-note"),
            ScriptedToolCall(name="ask_user", arguments={"text": "Colour?"}, id="call-ask"),
            ScriptedToolCall(name="transfer", arguments={"amount": 5}, id="call-transfer"),
        ),
    ),
    # Only a transfer to approve: the whole step waits.
    (
        Agent(name="approver", tools=[transfer_tool], initial_state={}),
        held_calls_script(
            ScriptedToolCall(name="transfer", arguments={"amount": 7}, id="call-transfer")
        ),
    ),
    # The same, answering slowly once approved: a client can re-attach while it runs.
    (
        Agent(name="slow-approver", tools=[transfer_tool], initial_state={}),
        held_calls_script(
            ScriptedToolCall(name="transfer", arguments={"amount": 7}, id="call-transfer"),
            delay=1.5,  # Long enough for a client on a busy machine to re-attach meanwhile.
        ),
    ),
    # Conversation memory: a writable block, and compaction of all but the last two messages.
    (
        Agent(
            name="memorizer",
            system_prompt="You remember.",
            memory=AgentMemory(
                context=[MEMORY_BLOCK],
                compaction=CompactionSettings(protect_head=0, tail_token_budget=0),
                compact_after=400,
            ),
        ),
        memorizer_script,
    ),
    (
        Agent(
            name="forgetful",
            memory=AgentMemory(
                compaction=CompactionSettings(protect_head=0, tail_token_budget=0),
                compact_after=1,
            ),
        ),
        failing_summary_script,
    ),
    (
        Agent(name="reporter", hooks=AgentHooks(on_complete=count_completion)),
        sequence_script(Turn(text="Reported.")),
    ),
    (Agent(name="second-chance"), second_chance_script),
    # In flight: a reply streamed slowly, as a real model's; and a tool that blocks its thread.
    (
        Agent(name="slow-streamer"),
        sequence_script(Turn(text=SLOW_REPLY, delay=SLOW_REPLY_SECONDS / SLOW_REPLY_DELTAS)),
    ),
    (
        Agent(name="sleeper", tools=[sleep_tool]),
        sequence_script(
            Turn(tool_calls=[ScriptedToolCall(name="sleep", arguments={"seconds": 3})]),
            Turn(text="Rested."),
        ),
    ),
    # Its system prompt raises, so every attempt at its first step does.
    (Agent(name="buggy", system_prompt=lambda state: state["missing"]), sequence_script(Turn())),
    # The memory API's: a readonly block, a small writable one, a searchable one, and compaction
    # of all but the first and the last message, summarised by its script.
    (
        Agent(
            name="librarian",
            memory=AgentMemory(
                context=[
                    ContextBlockSpec(
                        "soul", provider=SimpleNamespace(get=lambda: "You keep the library.")
                    ),
                    ContextBlockSpec("notes", description="Reader notes", max_tokens=20),
                    ContextBlockSpec(
                        "catalog", description="Books", provider=DatabaseSearchProvider
                    ),
                ],
                compaction=CompactionSettings(
                    protect_head=1, tail_token_budget=0, min_tail_messages=1
                ),
            ),
        ),
        sequence_script(Turn(text="## Topic\nThe books asked about.")),
    ),
]

registry = get_registry()
for agent, script in SCRIPTED_AGENTS:
    if not registry.has(agent.name):
        registry.register(agent)
    register_script(agent.name, script)
