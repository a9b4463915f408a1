"""JSON a client sends that no endpoint can take answers 400 `invalid-json`, never a 500.

`sessions_app.parsers.JSONParser` parses every DRF view's body; the API guard middleware decodes
bodies the same way. The WebSocket consumers' frames are tested beside them
(`tests/streams_app/test_consumer.py`, `tests/agents_app/test_state_socket.py`).
"""

import importlib
import time

import pytest
from django.conf import settings
from django.test import override_settings
from django.urls import clear_url_caches
from rest_framework.response import Response
from rest_framework.test import APIClient

from sessions_app.errors import InvalidFrame, InvalidJSON
from sessions_app.models import AgentSession, Message
from sessions_app.parsers import MAX_JSON_DEPTH, frame_loads, json_depth, json_loads
from sessions_app.stores import get_session_store

DEEP = "[" * 100_000 + "]" * 100_000


def nested(depth: int) -> str:
    """Return JSON arrays nested `depth` levels deep around the number 1."""
    return "[" * depth + "1" + "]" * depth


def client_of(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def echo(request, context) -> Response:
    """A custom endpoint that answers the body it was sent."""
    return Response({"body": request.data})


@pytest.fixture
def echo_endpoint():
    """Serve `echo` at `/api/echo`, as a project that declares it in `HELIX["ENDPOINTS"]`."""
    modules = [importlib.import_module(name) for name in ("agents_app.urls", settings.ROOT_URLCONF)]
    with override_settings(HELIX={**settings.HELIX, "ENDPOINTS": {"echo": f"{__name__}.echo"}}):
        for module in modules:  # Helix's routes, where the endpoints are, then the root.
            importlib.reload(module)
        clear_url_caches()
        yield "/api/echo"
    for module in modules:
        importlib.reload(module)
    clear_url_caches()


# Decoding


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("1", 0),
        ("[]", 1),
        ('{"a": [1, {"b": []}], "c": {}}', 4),
        ('["[[[{{{", "\\"[[", {"k]]": "}}"}]', 2),
        (nested(MAX_JSON_DEPTH), MAX_JSON_DEPTH),
    ],
)
def test_depth_counts_arrays_and_objects_but_not_brackets_in_strings(text, depth):
    assert json_depth(text) == depth


def test_the_deepest_accepted_json_parses_and_one_level_more_is_refused():
    assert json_loads(nested(MAX_JSON_DEPTH)) is not None

    with pytest.raises(InvalidJSON) as refused:
        json_loads(nested(MAX_JSON_DEPTH + 1))

    assert refused.value.code == "invalid-json"
    assert refused.value.details == {"depth": MAX_JSON_DEPTH + 1, "max_depth": MAX_JSON_DEPTH}


@pytest.mark.parametrize(
    "text",
    [DEEP, "NaN", "[Infinity]", '{"n": 1e400}', "-1e400", "1" * 5000, "{", "", b"\xff"],
    ids=["deep", "nan", "infinity", "huge", "-huge", "long-int", "truncated", "empty", "not-utf8"],
)
def test_what_no_endpoint_can_take_is_refused_as_invalid_json(text):
    with pytest.raises(InvalidJSON):
        json_loads(text)


def test_big_but_finite_numbers_and_brackets_in_strings_are_taken():
    text = '{"big": 1e308, "long": ' + "9" * 1000 + ', "text": "' + "[" * 1000 + '"}'

    value = json_loads(text)

    assert value["big"] == 1e308
    assert value["long"] == int("9" * 1000)


def test_an_unterminated_string_full_of_escapes_is_refused_without_rescanning_it():
    # A string pattern that backtracked would rescan the rest from every quote: hours.
    text = "[" * (MAX_JSON_DEPTH + 1) + '"' + '\\"' * 500_000

    started = time.monotonic()
    with pytest.raises(InvalidJSON):
        json_loads(text)

    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("text", "binary", "error"),
    [
        (None, b"\x00", InvalidFrame),
        ("[1]", None, InvalidFrame),
        ('{"type": 1}', None, InvalidFrame),
        ("{", None, InvalidJSON),
    ],
)
def test_a_frame_is_a_json_object_with_a_string_type(text, binary, error):
    assert frame_loads('{"type": "ping"}', None) == {"type": "ping"}
    with pytest.raises(error):
        frame_loads(text, binary)


# Over HTTP


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path",
    [
        "/api/sessions/",
        "/api/sessions/s-1/start",
        "/api/sessions/s-1/conversation",
        "/api/chat",
    ],
)
def test_a_body_nested_100000_levels_deep_answers_400_invalid_json(owner, path, settings):
    settings.DEBUG = True  # As it was reported: a 500 HTML page.
    get_session_store().create_session("s-1", agent_type="researcher", owner_id=owner.pk)

    response = client_of(owner).post(path, DEEP, content_type="application/json")

    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == "invalid-json"
    assert error["message"] == (
        f"The body nests 100000 levels deep; at most {MAX_JSON_DEPTH} are accepted."
    )
    assert AgentSession.objects.count() == 1


@pytest.mark.django_db
def test_a_deep_body_holding_a_nul_answers_400_not_a_crash_of_the_nul_guard(owner):
    body = '{"agentType": "counter", "metadata": {"k": "\\u0000"}, "tags": ' + DEEP + "}"

    response = client_of(owner).post("/api/sessions/", body, content_type="application/json")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid-json"
    assert not AgentSession.objects.exists()


@pytest.mark.django_db
def test_a_number_beyond_a_float_answers_400_and_stores_nothing(owner):
    get_session_store().create_session("s-1", agent_type="researcher", owner_id=owner.pk)
    body = '{"messages": [{"role": "user", "content": "hi", "metadata": {"score": 1e400}}]}'

    response = client_of(owner).post(
        "/api/sessions/s-1/conversation", body, content_type="application/json"
    )

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid-json"
    assert "1e400" in error["message"]
    assert not Message.objects.exists()


@pytest.mark.django_db
def test_a_body_that_is_not_utf8_answers_400_invalid_json(owner):
    response = client_of(owner).post(
        "/api/sessions/", b'{"agentType": "\xff"}', content_type="application/json"
    )

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid-json"
    assert not AgentSession.objects.exists()


@pytest.mark.django_db
def test_a_custom_endpoint_gets_the_same_parser(owner, echo_endpoint):
    client = client_of(owner)

    deepest = client.post(echo_endpoint, nested(MAX_JSON_DEPTH), content_type="application/json")
    deeper = client.post(echo_endpoint, nested(MAX_JSON_DEPTH + 1), content_type="application/json")

    assert deepest.status_code == 200
    assert json_depth(deepest.content.decode()) == MAX_JSON_DEPTH + 1  # Inside {"body": ...}.
    assert deeper.status_code == 400
    assert deeper.json()["error"]["code"] == "invalid-json"
