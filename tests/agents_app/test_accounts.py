"""Helix's own sign-in page (`/accounts/login/`), which lets in users who are not staff, and its
sign-out (`/accounts/logout/`, POST only)."""

import pytest
from django.contrib.auth import SESSION_KEY
from django.test import Client

pytestmark = pytest.mark.django_db


def test_the_sign_in_page_has_a_labelled_username_and_password_field():
    response = Client().get("/accounts/login/?next=/chat/researcher/")

    assert response.status_code == 200
    page = response.content.decode()
    assert '<label for="id_username">' in page
    assert '<label for="id_password">' in page
    assert 'autocomplete="current-password"' in page
    assert '<input type="hidden" name="next" value="/chat/researcher/">' in page


def test_a_user_who_is_not_staff_signs_in_and_lands_on_the_chat_page_they_asked_for(owner):
    assert not owner.is_staff
    client = Client()

    response = client.post(
        "/accounts/login/",
        {"username": "owner", "password": "pw", "next": "/chat/researcher/"},
    )

    assert response.status_code == 302
    assert response["Location"] == "/chat/researcher/"
    assert client.session[SESSION_KEY] == str(owner.pk)
    assert client.get("/chat/researcher/").status_code == 200


def test_a_sign_in_without_next_lands_on_the_landing_page(owner):
    response = Client().post("/accounts/login/", {"username": "owner", "password": "pw"})

    assert response.status_code == 302
    assert response["Location"] == "/"


def test_a_wrong_password_signs_nobody_in_and_says_so(owner):
    client = Client()

    response = client.post("/accounts/login/", {"username": "owner", "password": "nope"})

    assert response.status_code == 200
    assert 'role="alert"' in response.content.decode()
    assert SESSION_KEY not in client.session


def test_a_next_on_another_site_is_not_followed(owner):
    response = Client().post(
        "/accounts/login/",
        {"username": "owner", "password": "pw", "next": "https://evil.example/"},
    )

    assert response["Location"] == "/"


def test_signing_out_takes_a_post_and_lands_on_the_landing_page(owner):
    client = Client()
    client.force_login(owner)

    assert client.get("/accounts/logout/").status_code == 405
    response = client.post("/accounts/logout/")

    assert response.status_code == 302
    assert response["Location"] == "/"
    assert SESSION_KEY not in client.session
