"""Asking a model and reading its streamed reply: the CPU each event costs the waiting process.

A step spends its life on its model's reply, one server-sent event per token or few, after a
request that carries the whole conversation, so what a request and each event cost decides
how many conversations a worker carries once steps wait on real models. A server in a process
of its own (`bench.model_server`) streams the same reply to every request, `EVENTS` content
chunks `DELAY` seconds apart, as an OpenAI-compatible server does; this process sends a step's
request well into its conversation (`TURNS` turns with tool calls, `TOOLS` tools) and reads the
reply, one at a time and many at once, each in a thread, as steps do, and measures its CPU per
event, the request's included. The sides take turns, a round each, in rotating order:

- ours: `OpenAICompatAdapter.stream`, to its `Finish`, from the request's messages and tools:
  the body sent as it is from a thread of its own, the reply read in the caller's, each event's
  JSON taken as it is;
- the SDK's stream: `chat.completions.create(stream=True)` with the same body, iterated, which
  walks the body against the SDK's parameter types and builds a typed chunk of each event (the
  adapter went so, reading in a second thread, up to 2026-11-29);
- raw: the same body posted with httpx2 (the SDK's HTTP client), its lines read and each
  event's JSON parsed, nothing more: the floor of any client of such a server.
"""

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager

import httpx2
import openai

from agents_app.llm.base import AdapterContext, Finish, LLMRequest, TextDelta, ToolSpec
from agents_app.llm.openai_compat import OpenAICompatAdapter
from bench.harness import Options, Row, Table
from bench.model_server import FRAMING_EVENTS
from sessions_app.stores.types import Message, MessageRole

LEGEND = (
    "Model stream: the CPU this process spends per server-sent event asking a local "
    "OpenAI-compatible server in another process and reading its streamed reply, one reply at "
    "a time and many at once: ours (OpenAICompatAdapter) against the openai SDK's own request "
    "and stream (left) and against the same body posted and its lines read raw (right, the "
    "floor)."
)
EVENTS = 100  # Content chunks per reply.
DELAY = 0.01  # Seconds between them: a model streaming 100 tokens a second.
CONCURRENT, QUICK_CONCURRENT = (1, 50), (1, 5)
TARGET = 2.0  # Ours against the raw floor; the adapter before 2026-11-29 took 2.5 to 4.9.
ROUNDS, QUICK_ROUNDS = 3, 1
TURNS, TOOLS = 25, 8  # The request: a system prompt, 75 messages, 8 tools.
MODEL = "bench"
OURS, SDK, RAW = "ours", "openai SDK stream", "raw lines"


def run(options: Options) -> Iterator[Table]:
    """Measure each side at each concurrency; yield the table."""
    concurrency = QUICK_CONCURRENT if options.quick else CONCURRENT
    rounds = QUICK_ROUNDS if options.quick else ROUNDS
    with _model_server() as url, ExitStack() as clients:
        readers = _readers(url, clients)
        for read in readers.values():
            read()  # Warm up imports and the clients.
        cpu = {n: _cpu_per_event(readers, n, rounds) for n in concurrency}
    yield Table(
        title=f"A model's reply ({EVENTS + FRAMING_EVENTS} events, {DELAY * 1000:g} ms apart) "
        f"to a request of {3 * TURNS + 1} messages and {TOOLS} tools: CPU µs per event",
        columns=(OURS, SDK, RAW),
        rows=[
            Row(
                metric=f"µs per event, {n} {'stream' if n == 1 else 'streams at once'}",
                orm=cpu[n][OURS],
                lenient_raw=cpu[n][SDK],
                strict_raw=cpu[n][RAW],
                target=TARGET,
                precision=1,
            )
            for n in concurrency
        ],
        notes=[
            f"The process's CPU over each side's round, per event, the median of {rounds} "
            "round(s), each side's rounds taking turns with the others'; every stream in a "
            "thread of its own, as steps wait on their models. The server runs in a process "
            "of its own.",
        ],
    )


def _readers(url: str, clients: ExitStack) -> dict[str, Callable[[], None]]:
    """Return each side's read of one whole reply to the same conversation's request; its
    clients close with `clients`."""
    adapter = OpenAICompatAdapter(
        {"base_url": url, "model": MODEL},
        AdapterContext(session_id="bench", agent_type="bench", run_id="bench"),
    )
    request = _conversation()
    body = adapter.request_body(request)  # The others send what ours sends, built once.
    client = clients.enter_context(openai.OpenAI(base_url=url, api_key="bench", max_retries=0))
    http = clients.enter_context(
        httpx2.Client(base_url=url, headers={"Authorization": "Bearer bench"})
    )

    # Each side checks that it read the whole reply, or the run stops.
    def ours() -> None:
        events = list(adapter.stream(request))
        deltas = sum(isinstance(event, TextDelta) for event in events)
        assert deltas == EVENTS, deltas
        assert events[-1] == Finish("stop"), events[-1]

    def sdk() -> None:
        with client.chat.completions.create(**body) as stream:
            chunks = sum(1 for _ in stream)
        assert chunks == EVENTS + FRAMING_EVENTS, chunks

    def raw() -> None:
        chunks = 0
        with http.stream("POST", "/chat/completions", json=body) as response:
            for line in response.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    json.loads(line[6:])
                    chunks += 1
        assert chunks == EVENTS + FRAMING_EVENTS, chunks

    return {OURS: ours, SDK: sdk, RAW: raw}


def _conversation() -> LLMRequest:
    """Return the request of a step well into its conversation: `TURNS` turns of a question,
    a tool call and its result, and `TOOLS` tools."""
    messages = []
    for turn in range(TURNS):
        call = {"id": f"call_{turn}", "name": "tool_0", "arguments": {"a": f"question {turn}"}}
        messages += [
            Message(role=MessageRole.USER, content=f"Question {turn}, " * 30),
            Message(role=MessageRole.ASSISTANT, content="", tool_calls=[call]),
            Message(
                role=MessageRole.TOOL,
                content=json.dumps({"result": "x" * 200}),
                tool_call_id=call["id"],
                name="tool_0",
            ),
        ]
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
        "required": ["a"],
    }
    tools = [ToolSpec(f"tool_{n}", "Does one thing. " * 6, schema) for n in range(TOOLS)]
    return LLMRequest("You are helpful. " * 20, messages, tools)


def _cpu_per_event(
    readers: dict[str, Callable[[], None]], streams: int, rounds: int
) -> dict[str, float]:
    """Return each side's median CPU µs per event, reading `streams` replies at once a round."""
    spent: dict[str, list[float]] = {name: [] for name in readers}
    order = list(readers)
    for _ in range(rounds):
        for name in order:
            read = readers[name]
            began = time.process_time()
            with ThreadPoolExecutor(max_workers=streams) as threads:
                for future in [threads.submit(read) for _ in range(streams)]:
                    future.result()
            events = streams * (EVENTS + FRAMING_EVENTS)
            spent[name].append((time.process_time() - began) * 1e6 / events)
        order.append(order.pop(0))
    return {name: sorted(figures)[len(figures) // 2] for name, figures in spent.items()}


@contextmanager
def _model_server() -> Iterator[str]:
    """Run `bench.model_server` in a process of its own; yield its base URL."""
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.model_server", str(EVENTS), str(DELAY)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield server.stdout.readline().strip()
    finally:
        server.terminate()
        server.wait(timeout=10)
        server.stdout.close()
