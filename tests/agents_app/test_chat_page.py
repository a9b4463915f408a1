"""The chat page's view: who may open it, on which sessions, who may frame it, and its widget
included in another template. The page at work in a browser: `tests/browser`."""

import re

import pytest
from django.conf import settings
from django.template import RequestContext, Template
from django.test import Client, RequestFactory, override_settings

from sessions_app.stores import get_session_store
from tests.helix_project.environment import ENVIRONMENT_ONLY, run_shell

pytestmark = pytest.mark.django_db


@pytest.fixture
def client(owner) -> Client:
    client = Client()
    client.force_login(owner)
    return client


def frame_ancestors(*sources: str):
    return override_settings(HELIX={**settings.HELIX, "CHAT_FRAME_ANCESTORS": list(sources)})


def csrf_token_of(page: str) -> str:
    return re.search(r'data-csrf-token="([^"]*)"', page).group(1)


def test_a_visitor_who_is_not_signed_in_is_sent_to_helixs_sign_in_page_not_the_admins():
    response = Client().get("/chat/researcher/")

    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/chat/researcher/"


def test_a_new_chat_renders_the_widget_without_a_session(client):
    response = client.get("/chat/researcher/")

    assert response.status_code == 200
    page = response.content.decode()
    assert "data-helix-chat" in page
    assert 'data-agent-type="researcher"' in page
    assert 'data-session-id=""' in page
    assert 'data-page-url="/chat/researcher/"' in page
    assert 'src="/static/helix/chat.js"' in page
    assert 'href="/static/helix/chat.css"' in page
    assert csrf_token_of(page)
    assert response.cookies["csrftoken"].value


def test_the_users_session_renders_with_its_id(client, owner):
    get_session_store().create_session("mine", agent_type="researcher", owner_id=owner.pk)

    response = client.get("/chat/researcher/mine/")

    assert response.status_code == 200
    assert 'data-session-id="mine"' in response.content.decode()


def test_an_unknown_agent_type_answers_404(client):
    assert client.get("/chat/nobody/").status_code == 404
    assert client.get("/chat/nobody/some-session/").status_code == 404


def test_another_users_session_answers_404_as_a_missing_one_does(client, stranger):
    get_session_store().create_session("theirs", agent_type="researcher", owner_id=stranger.pk)

    foreign = client.get("/chat/researcher/theirs/")
    missing = client.get("/chat/researcher/absent/")

    assert foreign.status_code == missing.status_code == 404
    assert foreign.content == missing.content


def test_a_session_of_another_agent_type_answers_404(client, owner):
    get_session_store().create_session("counting", agent_type="counter", owner_id=owner.pk)

    assert client.get("/chat/researcher/counting/").status_code == 404
    assert client.get("/chat/counter/counting/").status_code == 200


def test_by_default_only_the_same_origin_may_frame_the_page(client):
    response = client.get("/chat/researcher/")

    assert response["Content-Security-Policy"] == "frame-ancestors 'self'"
    assert response["X-Frame-Options"] == "SAMEORIGIN"


def test_configured_ancestors_may_frame_the_page_and_x_frame_options_does_not_refuse_them(client):
    with frame_ancestors("'self'", "https://intranet.example.com"):
        response = client.get("/chat/researcher/")

    assert response["Content-Security-Policy"] == (
        "frame-ancestors 'self' https://intranet.example.com"
    )
    assert "X-Frame-Options" not in response


def test_no_ancestor_keeps_the_page_out_of_every_frame(client):
    with frame_ancestors("'none'"):
        response = client.get("/chat/researcher/")

    assert response["Content-Security-Policy"] == "frame-ancestors 'none'"
    assert response["X-Frame-Options"] == "DENY"


def test_other_pages_keep_refusing_every_frame(client):
    assert client.get("/admin/")["X-Frame-Options"] == "DENY"


@ENVIRONMENT_ONLY
def test_the_frame_ancestors_come_from_the_environment(tmp_path):
    script = (
        "from sessions_app.conf import helix_setting; print(helix_setting('CHAT_FRAME_ANCESTORS'))"
    )

    configured = run_shell(
        script, tmp_path=tmp_path, HELIX_CHAT_FRAME_ANCESTORS="'self'  https://a.example"
    )
    default = run_shell(script, tmp_path=tmp_path)

    assert configured.stdout.strip() == "[\"'self'\", 'https://a.example']", configured.stderr
    assert default.stdout.strip() == "[\"'self'\"]", default.stderr


def test_the_widget_renders_inside_another_template(owner):
    request = RequestFactory().get("/dashboard/")
    request.user = owner
    host = Template(
        "<main><h1>Dashboard</h1>"
        '{% include "helix/chat/widget.html" with agent_type="counter" session_id="s-42" %}'
        "</main>"
    )

    page = host.render(RequestContext(request, {}))

    assert page.startswith("<main><h1>Dashboard</h1>")
    assert page.endswith("</main>")
    assert 'data-agent-type="counter"' in page
    assert 'data-session-id="s-42"' in page
    assert 'data-sessions-url="/api/sessions/"' in page
    assert 'data-chat-url="/api/chat"' in page
    assert 'src="/static/helix/chat.js"' in page
    assert csrf_token_of(page)
    assert "data-page-url" not in page  # The host page keeps its own URL.
