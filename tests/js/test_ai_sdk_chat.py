"""The real AI SDK (`ai` on npm) chats with a live Helix through its own chat transport."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.agents_app.serving import Serve, http_status
from tests.helix_project.environment import manage

HERE = Path(__file__).resolve().parent
CREATE_TOKEN = """
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
user = get_user_model().objects.create_user("node-client")
print(Token.objects.create(user=user).key)
"""


@pytest.fixture
def node() -> str:
    """Return the node executable, with the test's packages installed (`make test` does)."""
    executable = shutil.which("node")
    assert executable is not None, "Node.js is needed for the client tests"
    assert (HERE / "node_modules" / "ai").is_dir(), "run `npm ci --prefix tests/js` first"
    return executable


@pytest.mark.one_backend("sqlite", reason="serve runs the embedded default whatever the run's")
def test_a_message_sent_through_the_ai_sdk_streams_back_the_reply(serve: Serve, node: str):
    serve.wait_for(lambda: http_status(f"{serve.site}/admin/login/") == 200, 60, "Daphne answered")
    serve.wait_for(lambda: " ready." in serve.output(), 60, "the Celery worker was ready")
    created = manage("shell", "-v", "0", "-c", CREATE_TOKEN, env=serve.env)
    assert created.returncode == 0, created.stdout + created.stderr
    token = created.stdout.split()[-1]

    result = subprocess.run(
        [node, str(HERE / "chat.mjs")],
        env={**serve.env, "HELIX_URL": serve.site, "HELIX_TOKEN": token},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["replies"] == ["The counter is now 5.", "The counter is now 7."]
