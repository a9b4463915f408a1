"""What a project adds to the API: hooks that answer with their own response, custom endpoints."""

import importlib

import pytest
from django.conf import settings
from django.http import JsonResponse
from django.test import override_settings
from django.urls import clear_url_caches
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from agents_app.definitions.agent import Agent
from agents_app.definitions.hooks import AbortResult, AgentHooks
from agents_app.definitions.registry import get_registry
from agents_app.runs.services import agent_start
from sessions_app.models import AgentSession

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("private_queue")]


def client_of(user=None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


@pytest.fixture
def gatekeeper():
    """Register an agent whose `before_start` refuses starts without a user id."""

    def before_start(context):
        if not context.body["userId"]:
            return AbortResult(
                status=401, body={"error": "User ID required"}, headers={"X-Gate": "closed"}
            )
        return None

    get_registry().register(Agent(name="gated", hooks=AgentHooks(before_start=before_start)))
    yield
    get_registry().unregister("gated")


@pytest.mark.usefixtures("gatekeeper")
def test_a_refusing_before_start_hook_answers_with_its_own_response(owner):
    client = client_of(owner)
    body = {"agentType": "gated", "input": {"message": "Hi"}}

    refused = client.post("/api/sessions/s-1/start", body, format="json")
    allowed = client.post("/api/sessions/s-2/start", {**body, "userId": "u-1"}, format="json")

    assert refused.status_code == 401
    assert refused.json() == {"error": "User ID required"}
    assert refused["X-Gate"] == "closed"
    assert list(AgentSession.objects.values_list("id", flat=True)) == ["s-2"]
    assert allowed.status_code == 202


def health(request, context):
    return JsonResponse({"status": "healthy", "isExecuting": context.execution_state.is_executing})


async def whoami(request, context):
    return JsonResponse({"user": request.user.username, "method": request.method})


def summary(request, context):
    return JsonResponse(
        {
            "sessionId": context.session_id,
            "status": context.execution_state.status,
            "isExecuting": context.execution_state.is_executing,
        }
    )


def status_override(request, context):
    return JsonResponse({"custom": True, "sessionId": context.session_id})


def not_a_response(request, context):
    return {"status": "healthy"}


ENDPOINTS = {
    "health": {"HANDLER": f"{__name__}.health", "PUBLIC": True},
    "whoami": f"{__name__}.whoami",
    "sessions/<session_id:session_id>/summary": f"{__name__}.summary",
    "sessions/<session_id:session_id>/status": f"{__name__}.status_override",
}


@pytest.fixture
def custom_endpoints():
    """Serve `ENDPOINTS` from the root URLconf, as a project that declares them does."""
    with override_settings(HELIX={**settings.HELIX, "ENDPOINTS": ENDPOINTS}):
        _reload_urls()
        yield
    _reload_urls()


def _reload_urls() -> None:
    importlib.reload(importlib.import_module("agents_app.urls"))  # Where the endpoints are.
    importlib.reload(importlib.import_module(settings.ROOT_URLCONF))
    clear_url_caches()


@pytest.mark.usefixtures("custom_endpoints")
def test_a_public_custom_endpoint_answers_anyone():
    response = client_of().get("/api/health")

    assert response.status_code == 200
    assert response.json() == {"status": "healthy", "isExecuting": False}


@pytest.mark.usefixtures("custom_endpoints")
def test_a_custom_endpoint_is_authenticated_unless_public_and_may_be_async(owner):
    token = Token.objects.create(user=owner)

    anonymous = client_of().post("/api/whoami")
    with_token = APIClient(HTTP_AUTHORIZATION=f"Token {token.key}").post("/api/whoami")

    assert anonymous.status_code in (401, 403)
    assert anonymous.json()["error"]["code"] == "not-authenticated"
    assert with_token.status_code == 200
    assert with_token.json() == {"user": "owner", "method": "POST"}


@pytest.mark.usefixtures("custom_endpoints")
def test_a_session_custom_endpoint_serves_only_the_owner_and_sees_the_execution(owner, stranger):
    agent_start(user=owner, agent_type="counter", message="Add 2", session_id="s-1")

    mine = client_of(owner).get("/api/sessions/s-1/summary")
    theirs = client_of(stranger).get("/api/sessions/s-1/summary")
    missing = client_of(owner).get("/api/sessions/s-2/summary")

    assert mine.status_code == 200
    assert mine.json() == {"sessionId": "s-1", "status": "running", "isExecuting": True}
    assert theirs.status_code == missing.status_code == 404
    assert theirs.content == missing.content.replace(b"s-2", b"s-1")


@pytest.mark.usefixtures("custom_endpoints")
def test_a_custom_endpoint_is_served_before_the_built_in_route(owner):
    agent_start(user=owner, agent_type="counter", message="Add 2", session_id="s-1")

    response = client_of(owner).get("/api/sessions/s-1/status")

    assert response.json() == {"custom": True, "sessionId": "s-1"}


def test_without_the_setting_the_built_in_route_serves(owner):
    agent_start(user=owner, agent_type="counter", message="Add 2", session_id="s-1")

    response = client_of(owner).get("/api/sessions/s-1/status")

    assert response.json()["isExecuting"] is True
    assert client_of().get("/api/health").status_code == 404


def test_a_handler_that_returns_no_response_is_a_programming_error(owner):
    endpoints = {"broken": f"{__name__}.not_a_response"}
    with override_settings(HELIX={**settings.HELIX, "ENDPOINTS": endpoints}):
        _reload_urls()
        try:
            with pytest.raises(TypeError, match="must return an HttpResponse, not dict"):
                client_of(owner).get("/api/broken")
        finally:
            _reload_urls()


@pytest.mark.parametrize(("policy", "answer"), [("reject", 409), ("enqueue", 202)])
def test_a_start_while_a_run_runs_follows_the_concurrency_policy(owner, settings, policy, answer):
    settings.HELIX = {**settings.HELIX, "RUN_CONCURRENCY": policy}
    client = client_of(owner)
    body = {"agentType": "counter", "input": {"message": "Add 2"}}

    first = client.post("/api/sessions/s-1/start", body, format="json")
    second = client.post("/api/sessions/s-1/start", body, format="json")

    assert (first.status_code, first.json()["status"]) == (202, "started")
    assert second.status_code == answer
    if answer == 409:
        assert second.json()["error"]["code"] == "run-not-active"
    else:
        assert second.json()["status"] == "queued"
        assert second.json()["runId"] != first.json()["runId"]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/sessions/s-1/start", {"agentType": "counter", "input": {"message": "a\x00b"}}),
        (
            "/api/sessions/s-1/start",
            {
                "agentType": "counter",
                "input": {"message": [{"content": "x", "metadata": {"k\x00": 1}}]},
            },
        ),
        ("/api/sessions/", {"agentType": "counter", "metadata": {"k": "v\x00"}}),
    ],
)
def test_a_nul_anywhere_in_a_json_body_answers_400_and_writes_nothing(owner, path, body):
    response = client_of(owner).post(path, body, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid-input"
    assert not AgentSession.objects.exists()


@pytest.mark.parametrize(
    "path",
    ["/api/sessions/s-1/start", "/api/chat", "/api/sessions/"],
)
def test_an_unpaired_surrogate_in_a_json_body_answers_400_and_writes_nothing(owner, path):
    # A decoded JSON string holds a surrogate only unpaired; neither database stores one.
    body = '{"agentType": "counter", "input": {"message": "a\\ud800b"}, "id": "c", "messages": []}'

    response = client_of(owner).post(path, body, content_type="application/json")

    assert response.status_code == 400
    assert response.json()["error"]["details"] == {"body": "surrogate"}
    assert not AgentSession.objects.exists()


def test_a_nul_in_the_query_or_in_a_session_id_is_refused(owner):
    client = client_of(owner)

    in_query = client.get("/api/sessions/", {"agentType": "a\x00"})
    in_path = client.get("/api/sessions/a%00b/")

    assert in_query.status_code == 400
    assert in_query.json()["error"]["details"] == {"query": "NUL"}
    assert in_path.status_code == 404
    assert in_path.json()["error"]["code"] == "not-found"


def test_the_api_speaks_json_only(owner):
    response = client_of(owner).post(
        "/api/sessions/", "agentType=counter", content_type="application/x-www-form-urlencoded"
    )

    assert response.status_code == 415
    assert not AgentSession.objects.exists()
