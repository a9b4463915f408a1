"""Fixtures of the MCP suites: the fixture MCP server, a Celery worker and Daphne, each started
once per test module, and helpers to wait on runs.

The fixture server's address and secret go into this process's environment too, so that the
agents of `mcp_agents` are built alike here, in the worker and in Daphne.
"""

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agents_app.mcp.client import get_pool
from sessions_app.stores import get_session_store
from sessions_app.stores.types import RunStatus, SessionStatus
from streams_app.backends import get_stream_manager
from tests.agents_app.mcp import mcp_agents
from tests.agents_app.worker import Worker, module_worker
from tests.live import free_port
from tests.live_clients import Daphne, live_daphne
from tests.waiting import wait_for

AGENTS = "agents_app.demo,tests.agents_app.agents,tests.agents_app.mcp.mcp_agents"
FINISHED = {SessionStatus.COMPLETED, SessionStatus.FAILED, SessionStatus.INTERRUPTED}
SUSPENDED = {SessionStatus.SUSPENDED_CLIENT_TOOL, SessionStatus.SUSPENDED_STEP_PARTIAL}
# For the suites of Helix as an MCP client: the calls, their records and what they stream are the
# same on either database and broker (the store's conformance suite covers both), so one pass
# runs them, the one whose services cost least. The MCP endpoint's suites run in both.
CLIENT_SIDE = pytest.mark.one_backend(
    "sqlite", reason="Helix's MCP calls do not depend on the database or the broker"
)


@dataclass(frozen=True)
class FixtureServer:
    """The fixture MCP server: where it is, its secret, and the log of the calls it ran."""

    url: str
    key: str
    calls_log: Path
    log: Path

    def calls(self, tool: str | None = None) -> list[dict]:
        if not self.calls_log.exists():
            return []
        lines = [json.loads(line) for line in self.calls_log.read_text().splitlines()]
        return [line for line in lines if tool is None or line["tool"] == tool]


@pytest.fixture(scope="module")
def fixture_server(tmp_path_factory) -> Iterator[FixtureServer]:
    folder = tmp_path_factory.mktemp("mcp-fixture")
    port = free_port()
    server = FixtureServer(
        url=f"http://127.0.0.1:{port}",
        key=f"sk-helix-test-{uuid.uuid4().hex}",
        calls_log=folder / "calls.log",
        log=folder / "server.log",
    )
    env = {
        "HELIX_TEST_MCP_URL": server.url,
        mcp_agents.UNREACHABLE_URL_VARIABLE: f"http://127.0.0.1:{free_port()}/mcp",
        "FIXTURE_CALLS_LOG": str(server.calls_log),
        "FIXTURE_KEY": server.key,
    }
    previous = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    with server.log.open("ab") as output:
        process = subprocess.Popen(
            [sys.executable, str(mcp_agents.FIXTURE), "http", str(port)],
            env=dict(os.environ),
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_listening(port, process, server.log)
        yield server
    finally:
        get_pool().close_all()
        process.terminate()
        process.wait(timeout=10)
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="module")
def worker(
    fixture_server, django_db_setup, django_db_blocker, tmp_path_factory
) -> Iterator[Worker]:
    with module_worker(
        django_db_blocker,
        tmp_path_factory,
        HELIX_AGENTS=AGENTS,
        INTERRUPT_POLL_SECONDS="0.1",
        STEP_LEASE_SECONDS="3",
        STEP_ERROR_BACKOFF_SECONDS="0.05",
    ) as running:
        yield running


@pytest.fixture(scope="module")
def daphne(worker: Worker, tmp_path_factory) -> Iterator[Daphne]:
    with live_daphne(tmp_path_factory.mktemp("daphne"), AGENTS, worker.queue) as server:
        yield server


def settled(session_id: str, statuses=FINISHED, timeout: float = 60.0):
    """Wait until the session's run is in one of `statuses` and not running; return its state."""

    def check():
        state = get_session_store().load_state(session_id)
        run = get_session_store().get_current_run(session_id)
        return state.status in statuses and run.status != RunStatus.RUNNING and state

    return wait_for(check, timeout, f"session {session_id} to settle")


def stream_chunks(session_id: str) -> list[dict]:
    stream_id = get_session_store().load_state(session_id).stream_id
    return [c.chunk for c in get_stream_manager().get_all_chunks(stream_id)]


def plan(*steps: list[tuple[str, dict]]) -> str:
    """Return the message that makes a plan agent call these tools, step by step."""
    return json.dumps([[list(call) for call in step] for step in steps])


def _wait_listening(port: int, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    pytest.fail(f"The fixture MCP server did not listen within 30 s:\n{log.read_text()}")
