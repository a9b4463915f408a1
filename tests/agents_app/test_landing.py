"""The landing page, `/`: the registered agents with their chat links for a signed-in user, the
admin and the API docs for anyone, and who is signed in."""

import pytest
from django.test import Client

from agents_app.demo import counter, researcher

pytestmark = pytest.mark.django_db


@pytest.fixture
def client(owner) -> Client:
    client = Client()
    client.force_login(owner)
    return client


def test_a_signed_in_user_sees_every_demo_agent_with_its_description_and_chat_link(client):
    response = client.get("/")

    assert response.status_code == 200
    page = response.content.decode()
    for agent in (researcher, counter):
        assert f'<a href="/chat/{agent.name}/">Chat with {agent.name}</a>' in page
        assert agent.description in page


def test_a_signed_in_user_is_named_with_a_sign_out_button_that_posts(client):
    page = client.get("/").content.decode()

    assert '<strong data-role="username">owner</strong>' in page
    assert '<form method="post" action="/accounts/logout/">' in page
    assert 'name="csrfmiddlewaretoken"' in page
    assert ">Sign out</button>" in page
    assert ">Sign in</a>" not in page


def test_an_anonymous_visitor_gets_a_sign_in_link_and_no_agents():
    response = Client().get("/")

    assert response.status_code == 200
    page = response.content.decode()
    assert '<a href="/accounts/login/?next=/">Sign in</a>' in page
    assert "/chat/" not in page
    assert researcher.description not in page
    assert "Sign out" not in page


@pytest.mark.parametrize("signed_in", [False, True])
def test_the_admin_and_the_api_docs_are_linked_for_everyone(signed_in, owner):
    client = Client()
    if signed_in:
        client.force_login(owner)

    page = client.get("/").content.decode()

    assert '<a href="/admin/">Admin</a>' in page
    assert '<a href="/api/docs/">API docs</a>' in page


def test_the_page_is_styled_like_the_chat(client):
    page = client.get("/").content.decode()

    assert 'href="/static/helix/pages.css"' in page
    assert Client().get("/static/helix/pages.css").status_code == 200


def test_the_page_takes_no_post(client):
    assert client.post("/").status_code == 405
