"""Under `/api/`, a path no route matches and a method a plain view does not take answer in the
error shape, whatever `DEBUG` says, and never with a CSRF or debug HTML page.
"""

import pytest
from django.test import Client
from rest_framework.test import APIClient

from sessions_app.stores import get_session_store

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _debug(settings):
    """Run as a developer does: Django's HTML 404 page stands in for `handler404` then."""
    settings.DEBUG = True


def logged_in(user) -> Client:
    """Return a browser-like client: a session login, with CSRF checks as in production."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


@pytest.mark.parametrize("method", ["get", "post", "put", "patch", "delete", "options"])
@pytest.mark.parametrize("path", ["/api/no-such-route", "/api/sessions/s-1/no-such-thing"])
def test_a_path_no_route_matches_answers_the_json_404(owner, method, path):
    response = getattr(logged_in(owner), method)(path)

    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {
        "error": {"code": "not-found", "message": f"No route matches {path!r}.", "details": {}}
    }


def test_get_of_a_route_without_its_final_slash_is_still_redirected(owner):
    response = logged_in(owner).get("/api/sessions?limit=5")

    assert response.status_code == 301
    assert response["Location"] == "/api/sessions/?limit=5"


def test_post_to_a_route_without_its_final_slash_answers_the_json_404(owner):
    # Django raises under DEBUG here (it cannot redirect a POST); elsewhere it redirects, and
    # the client's body is lost.
    response = logged_in(owner).post("/api/sessions", {}, content_type="application/json")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not-found"


@pytest.mark.parametrize("method", ["post", "put", "delete"])
def test_a_wrong_method_on_the_sse_stream_answers_the_json_405(owner, method):
    get_session_store().create_session("s-1", agent_type="researcher", owner_id=owner.pk)

    response = getattr(logged_in(owner), method)("/api/sessions/s-1/stream")

    assert response.status_code == 405
    assert response["Allow"] == "GET"
    assert response.json()["error"] == {
        "code": "method-not-allowed",
        "message": f'Method "{method.upper()}" not allowed.',
        "details": {},
    }


def test_a_wrong_method_on_a_drf_route_answers_the_json_405_too(owner):
    client = APIClient()
    client.force_authenticate(owner)

    response = client.put("/api/sessions/s-1/status")

    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method-not-allowed"
