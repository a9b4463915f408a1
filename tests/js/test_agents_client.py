"""The real `agents` client (`AgentClient` from `agents/client` on npm) shares an agent's state
through a live Daphne: state sync between clients, rejected writes, RPC, and a server restart.

The script `agent_state.mjs` drives the clients and prints what they see; the assertions are here.
Daphne serves this run's test database: SQLite, or PostgreSQL with Redis in the PostgreSQL run.
"""

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from rest_framework.authtoken.models import Token

from sessions_app.stores import get_session_store
from tests.live import live_env
from tests.live_clients import Daphne

pytestmark = pytest.mark.django_db(transaction=True)

HERE = Path(__file__).resolve().parent
INITIAL = {"players": [], "score": 0, "status": "waiting"}


@pytest.fixture
def node() -> str:
    """Return the node executable, with the test's packages installed (`make test` does)."""
    executable = shutil.which("node")
    if executable is None:
        pytest.skip("Node.js is needed for the client tests")
    if not (HERE / "node_modules" / "agents").is_dir():
        pytest.skip("the client tests' packages are missing: run `npm ci --prefix tests/js`")
    return executable


@pytest.fixture
def daphne(tmp_path: Path) -> Iterator[Daphne]:
    env = live_env(tmp_path, HELIX_AGENTS="agents_app.demo,tests.agents_app.state_agents")
    with Daphne(env, tmp_path / "daphne.log") as server:
        yield server


@pytest.fixture
def token(owner) -> str:
    return Token.objects.create(user=owner).key


def run_clients(node: str, daphne: Daphne, token: str, scenario: str, name: str) -> dict:
    """Run a scenario of `agent_state.mjs` and return its report lines by step."""
    result = subprocess.run(
        [node, str(HERE / "agent_state.mjs"), scenario, name],
        env={**daphne.env, "HELIX_HOST": f"127.0.0.1:{daphne.port}", "HELIX_TOKEN": token},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr + daphne.log.read_text()
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    return {line.pop("step"): line for line in lines}


def stored_state(name: str) -> dict | None:
    return get_session_store().load_state(name).custom_state


def test_two_agent_clients_share_the_state_and_a_rejected_write_changes_nothing(
    node: str, daphne: Daphne, token: str
):
    steps = run_clients(node, daphne, token, "share", "table-1")

    for client, pk in (("a", "client-a"), ("b", "client-b")):
        assert steps["connected"][client] == {
            "agent": "game-agent",
            "name": "table-1",
            "id": pk,
            "updates": [{"state": INITIAL, "source": "server"}],
        }
    from_a = {"players": ["ann"], "score": 1, "status": "playing"}
    assert steps["a-to-b"] == {
        "b_update": {"state": from_a, "source": "server"},
        "a_state": from_a,
        "a_update": {"state": from_a, "source": "client"},
    }
    from_b = {"players": ["ann", "bob"], "score": 2, "status": "playing"}
    assert steps["b-to-a"] == {
        "a_update": {"state": from_b, "source": "server"},
        "b_state": from_b,
    }
    assert steps["rejected"] == {
        "errors": ["State update rejected"],
        "stored_score": 2,
        "b_updates_since": [],
    }
    assert stored_state("table-1") == from_b


def test_agent_client_calls_return_results_streams_and_errors(
    node: str, daphne: Daphne, token: str
):
    steps = run_clients(node, daphne, token, "rpc", "table-2")

    assert steps["double"] == {"result": 42}
    written = {**INITIAL, "players": ["ann"]}
    assert steps["add_player"] == {
        "result": ["ann"],
        "update": {"state": written, "source": "server"},
    }
    assert steps["count"] == {
        "result": {"counted": 3},
        "chunks": [1, 2, 3],
        "done": [{"counted": 3}],
        "errors": [],
    }
    assert steps["count_then_fail"] == {
        "error": "stream broke",
        "chunks": [1],
        "done": [],
        "errors": ["stream broke"],
    }
    assert steps["fail"] == {"error": "no luck"}
    assert stored_state("table-2") == written


def test_a_new_agent_client_gets_the_state_written_before_the_server_restarted(
    node: str, daphne: Daphne, token: str
):
    written = run_clients(node, daphne, token, "write", "table-3")["written"]
    assert written["stored_score"] == written["state"]["score"]

    daphne.stop()
    assert stored_state("table-3") == written["state"]
    daphne.start()
    read = run_clients(node, daphne, token, "read", "table-3")["read"]

    assert read == {
        "updates": [{"state": written["state"], "source": "server"}],
        "state": written["state"],
    }
