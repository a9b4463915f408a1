"""`/api/sessions/`: listing, creating, reading, relabelling and deleting sessions."""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from sessions_app.stores import get_session_store
from sessions_app.stores.types import Message, MessageRole
from streams_app.backends import get_stream_manager
from streams_app.chunks import TextDelta

pytestmark = pytest.mark.django_db


def client_of(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def create(client: APIClient, **body) -> dict:
    response = client.post("/api/sessions/", {"agentType": "counter", **body}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_creating_a_session_answers_its_state_with_the_agents_initial_state(owner):
    expiry = timezone.now() + timedelta(hours=1)

    body = create(
        client_of(owner),
        userId="u-1",
        tags=["a", "b"],
        metadata={"team": "red"},
        expiresAt=expiry.isoformat(),
    )

    assert body["agentType"] == "counter"
    assert body["status"] == "active"
    assert body["state"] == {"count": 0}
    assert (body["userId"], body["tags"], body["metadata"]) == ("u-1", ["a", "b"], {"team": "red"})
    assert body["version"] == 1
    stored = get_session_store().load_state(body["sessionId"])
    assert stored.owner_id == owner.pk
    assert stored.expires_at == expiry


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "agentType"),
        ({"agentType": "counter", "tags": "one"}, "tags"),
        ({"agentType": "counter", "metadata": {"n": 1}}, "metadata"),
        ({"agentType": "counter", "expiresAt": "soon"}, "expiresAt"),
    ],
)
def test_creating_with_bad_input_answers_400_naming_the_field(owner, body, field):
    response = client_of(owner).post("/api/sessions/", body, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid-input"
    assert field in response.json()["error"]["details"]
    assert get_session_store().list_sessions(owner_id=owner.pk).total == 0


def test_creating_a_session_of_an_unknown_agent_answers_404_listing_the_known_ones(owner):
    response = client_of(owner).post("/api/sessions/", {"agentType": "nobody"}, format="json")

    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "agent-not-found"
    assert "counter" in error["details"]["available_types"]


def test_the_list_holds_only_the_callers_sessions_filtered_and_paged(owner, stranger):
    client = client_of(owner)
    red = [create(client, tags=["red"], metadata={"team": "a"})["sessionId"] for _ in range(3)]
    create(client, tags=["blue"], metadata={"team": "b"})
    create(client_of(stranger), tags=["red"], metadata={"team": "a"})

    everything = client.get("/api/sessions/").json()
    page = client.get(
        "/api/sessions/",
        {"tags": "red", "metadata": "team=a", "limit": 2, "orderBy": "created_at"},
    ).json()
    rest = client.get(
        "/api/sessions/", {"tags": "red", "offset": 2, "orderBy": "created_at"}
    ).json()

    assert everything["total"] == 4
    assert (page["total"], page["offset"], page["limit"], page["hasMore"]) == (3, 0, 2, True)
    assert [s["sessionId"] for s in page["results"] + rest["results"]] == red
    assert rest["hasMore"] is False


def test_the_list_filters_by_status_agent_type_and_time(owner):
    client = client_of(owner)
    first = create(client)["sessionId"]
    later = timezone.now()
    second = create(client, userId="u-2")["sessionId"]
    get_session_store().update_status(first, "failed")

    def ids(**query) -> list[str]:
        return [s["sessionId"] for s in client.get("/api/sessions/", query).json()["results"]]

    assert ids(status="failed") == [first]
    assert ids(status=["failed", "active"], orderBy="created_at") == [first, second]
    assert ids(createdAfter=later.isoformat()) == [second]
    assert ids(userId="u-2") == [second]
    assert ids(agentType="researcher") == []


@pytest.mark.parametrize(
    "query",
    [
        {"limit": 0},
        {"limit": 5000},
        {"offset": -1},
        {"offset": 2**63},
        {"status": "sleeping"},
        {"metadata": "x"},
        {"userId": ""},
    ],
)
def test_a_bad_list_query_answers_400(owner, query):
    response = client_of(owner).get("/api/sessions/", query)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid-input"


def test_reading_a_session_answers_its_state(owner):
    client = client_of(owner)
    session_id = create(client)["sessionId"]
    get_session_store().append_messages(session_id, [Message(role=MessageRole.USER, content="hi")])

    body = client.get(f"/api/sessions/{session_id}/").json()

    assert body["sessionId"] == session_id
    assert body["messageCount"] == 1
    assert body["streamId"] == session_id


def test_patch_changes_only_labels_and_bumps_the_version(owner):
    client = client_of(owner)
    created = create(client, tags=["old"], metadata={"team": "a"})
    session_id = created["sessionId"]

    response = client.patch(
        f"/api/sessions/{session_id}/", {"tags": ["new"], "expiresAt": None}, format="json"
    )

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["tags"], body["metadata"], body["expiresAt"]) == (["new"], {"team": "a"}, None)
    assert body["version"] == created["version"] + 1


@pytest.mark.parametrize(
    "body", [{"status": "completed"}, {"version": 99}, {"state": {"count": 5}}, {"tags": None}]
)
def test_patch_refuses_anything_but_labels_and_writes_nothing(owner, body):
    client = client_of(owner)
    created = create(client)

    response = client.patch(f"/api/sessions/{created['sessionId']}/", body, format="json")

    assert response.status_code == 400
    assert set(body) <= set(response.json()["error"]["details"])
    assert client.get(f"/api/sessions/{created['sessionId']}/").json() == created


def test_patch_while_a_step_runs_answers_409_and_writes_nothing(owner):
    client = client_of(owner)
    session_id = create(client)["sessionId"]
    get_session_store().acquire_lease(session_id, "worker", ttl=30)
    before = client.get(f"/api/sessions/{session_id}/").json()

    response = client.patch(f"/api/sessions/{session_id}/", {"tags": ["x"]}, format="json")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "session-busy"
    assert client.get(f"/api/sessions/{session_id}/").json() == before


def test_delete_removes_the_session_and_its_stream(owner):
    client = client_of(owner)
    session_id = create(client)["sessionId"]
    writer = get_stream_manager().create_writer(session_id, "run-1", "counter")
    writer.write(TextDelta(step=1, session_id=session_id, agent_type="counter", delta="hi"))

    response = client.delete(f"/api/sessions/{session_id}/")

    assert response.status_code == 204
    assert get_session_store().load_state(session_id) is None
    assert get_stream_manager().get_stream_info(session_id) is None
    assert client.get(f"/api/sessions/{session_id}/").status_code == 404


@pytest.mark.parametrize("method", ["get", "patch", "delete"])
def test_another_users_session_answers_404_like_a_missing_one(owner, stranger, method):
    session_id = create(client_of(owner))["sessionId"]
    client = client_of(stranger)

    theirs = getattr(client, method)(f"/api/sessions/{session_id}/", {}, format="json")
    missing = getattr(client, method)("/api/sessions/missing/", {}, format="json")

    assert theirs.status_code == missing.status_code == 404
    assert theirs.json()["error"]["code"] == missing.json()["error"]["code"] == "session-not-found"
    assert get_session_store().load_state(session_id) is not None


def test_anonymous_callers_are_refused():
    response = APIClient().get("/api/sessions/")

    assert response.status_code in (401, 403)
    assert response.json()["error"]["code"] == "not-authenticated"


def test_session_auth_enforces_csrf_on_unsafe_methods(owner):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(owner)

    refused = client.post("/api/sessions/", {"agentType": "counter"}, format="json")
    client.cookies["csrftoken"] = "a" * 32
    accepted = client.post(
        "/api/sessions/", {"agentType": "counter"}, format="json", HTTP_X_CSRFTOKEN="a" * 32
    )

    assert refused.status_code == 403
    assert "CSRF" in refused.json()["error"]["message"]
    assert accepted.status_code == 201


def test_token_auth_serves_the_tokens_user(owner):
    token = Token.objects.create(user=owner)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")

    created = client.post("/api/sessions/", {"agentType": "counter"}, format="json")

    assert created.status_code == 201
    assert get_session_store().load_state(created.json()["sessionId"]).owner_id == owner.pk
