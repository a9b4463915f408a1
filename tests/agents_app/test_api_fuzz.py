"""Schemathesis fuzzes the live API from its own OpenAPI schema: every check (but one, below),
positive and negative data, at least 50 examples per operation, zero failures.

The system runs as `manage.py serve` runs it (Daphne and a Celery worker) on this run's test
database. It runs in the PostgreSQL pass only: it fuzzes the API, which is the same on either
database, and PostgreSQL is production's (the store and stream suites cover both). Half the
session ids the fuzzer sends are real sessions of the caller, so operations reach real objects as
well as missing ones. The run-start throttle is off: a fuzzer starts runs far faster than any
limit worth having (the throttle has its own test).
"""

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from rest_framework.authtoken.models import Token

from tests.agents_app.serving import Serve, http_status
from tests.live import free_port, live_env

# As long as the fuzzer may take: on a slow day it went past the suite's 300 s.
FUZZ_TIMEOUT = 900
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.one_backend("postgresql", reason="the API fuzz does not depend on the database"),
    pytest.mark.timeout(FUZZ_TIMEOUT),
]
EXAMPLES_PER_OPERATION = 50
CONFIG = """
[auth.openapi.tokenAuth]
api_key = "Token {token}"

[checks]
# Starting a run on a free session id creates that session (reference 001 `/start`), so a
# deleted session's id may be taken again: by design, not a use after free.
use_after_free.enabled = false

[generation]
# The API refuses NUL anywhere in its input (PostgreSQL cannot store it; see its own test),
# which an OpenAPI 3.0 schema cannot say of object keys and free-form JSON.
allow-x00 = false

[dictionaries.sessions]
values = {session_ids}

[parameters]
"path.session_id" = {{ dictionary = "sessions", probability = 0.5 }}

[[operations]]
include-operation-id = "chat_send"
# A new chat needs `agentType`, and the last message must be the user's: rules a JSON schema
# cannot state, so schema-valid bodies may be refused with 400.
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "409"]

[[operations]]
include-operation-id = ["sessions_context_update", "sessions_context_append_create"]
# A block's content may not pass its maxTokens, a token estimate a JSON schema cannot state.
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409", "422"]
"""


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Serve]:
    """Serve Daphne and a Celery worker on the test database, without the run-start throttle."""
    env = live_env(
        tmp_path,
        HELIX_RUN_START_RATE="",
        CELERY_TASK_DEFAULT_QUEUE=f"fuzz-{uuid.uuid4().hex[:12]}",
    )
    server = Serve(env, free_port(), tmp_path / "serve.log")
    try:
        server.wait_for(lambda: http_status(f"{server.site}/api/schema/") == 200, 60, "Daphne")
        server.wait_for(lambda: " ready." in server.output(), 60, "the Celery worker was ready")
        yield server
    finally:
        server.kill()


def owned_sessions(site: str, token: str) -> list[str]:
    """Create an idle session and a session with a run, through the API; return their ids."""
    with httpx.Client(base_url=site, headers={"Authorization": f"Token {token}"}) as client:
        idle = client.post("/api/sessions/", json={"agentType": "counter"})
        started = client.post(
            f"/api/sessions/{uuid.uuid4()}/start",
            json={"agentType": "counter", "input": {"message": "Add 2"}},
        )
    assert (idle.status_code, started.status_code) == (201, 202), idle.text + started.text
    return [idle.json()["sessionId"], started.json()["sessionId"]]


def test_the_live_api_passes_every_schemathesis_check(live: Serve, django_user_model, tmp_path):
    token = Token.objects.create(user=django_user_model.objects.create_user("fuzzer")).key
    config = tmp_path / "schemathesis.toml"
    session_ids = json.dumps(owned_sessions(live.site, token))
    config.write_text(CONFIG.format(token=token, session_ids=session_ids))
    report = tmp_path / "report.json"
    command = [str(Path(sys.executable).with_name("st")), "--config-file", str(config), "run"]
    command += [f"{live.site}/api/schema/", "--checks", "all", "--mode", "all"]
    command += ["--max-examples", str(EXAMPLES_PER_OPERATION), "--generation-database", "none"]
    command += ["--request-timeout", "30", "--workers", "2", "--no-color"]
    command += ["--report", "json", "--report-json-path", str(report)]

    result = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=FUZZ_TIMEOUT, check=False
    )

    print(result.stdout, result.stderr)
    assert result.returncode == 0, "Schemathesis found failures: see its output above."
    summary = json.loads(report.read_text())
    assert summary["operations"]["tested"] == summary["operations"]["total"] >= 20
    assert summary["test_cases"]["generated"] >= EXAMPLES_PER_OPERATION * 20
    assert summary["failures"] == []
    assert summary["errors"] == []
