"""The first run in a real browser: the login `manage.py serve` prints on a database without users
signs in, the landing page lists the agents, and a user who is not staff signs in on Helix's own
sign-in page and chats. Chromium, driven by Playwright, against the live Daphne and Celery worker
of the browser suites (`tests/browser/conftest.py`) on this run's test database.
"""

import re
from io import StringIO

import pytest
from django.conf import global_settings
from django.test import override_settings
from playwright.sync_api import Page, expect, sync_playwright

from agents_app.management.commands.serve import Command
from agents_app.operations.first_run import first_superuser_create
from tests.browser.chat_agents import STORY
from tests.browser.pages import CHROMIUM_ARGS, REPLY, STATUS, screenshot, send
from tests.live_clients import Daphne
from tests.services import chromium_executable

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.one_backend("sqlite", reason="the first run is the embedded default's"),
]

CHATTER_PASSWORD = "a-long-enough-chat-password"


def sign_in(page: Page, username: str, password: str) -> None:
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()


def test_the_printed_first_login_signs_in_and_a_user_who_is_not_staff_chats(
    daphne: Daphne,
    django_user_model,
):
    site = f"http://127.0.0.1:{daphne.port}"
    # Daphne checks passwords with the project's hashers, not the tests' cheap one.
    with override_settings(PASSWORD_HASHERS=global_settings.PASSWORD_HASHERS):
        assert not django_user_model.objects.exists()
        printed = StringIO()
        Command(stdout=printed).welcome(site=site, login=first_superuser_create())
        django_user_model.objects.create_user("chatter", password=CHATTER_PASSWORD)
    output = printed.getvalue()
    username = re.search(r"^\s*username\s+(\S+)$", output, re.MULTILINE)[1]
    password = re.search(r"^\s*password\s+(\S+)$", output, re.MULTILINE)[1]
    assert f"landing page  {site}/" in output
    assert f"{site}/api/docs/" in output

    # Playwright's sync API runs an event loop in this thread: no ORM call from here on.
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_executable(), args=CHROMIUM_ARGS
        )
        expect.set_options(timeout=20_000)
        options = {"base_url": site, "viewport": {"width": 1100, "height": 760}}

        page = browser.new_context(**options).new_page()
        page.goto("/")
        expect(page.get_by_role("link", name="Chat with researcher")).to_have_count(0)
        page.get_by_role("link", name="Sign in").first.click()
        sign_in(page, username, password)
        expect(page).to_have_url(f"{site}/")
        expect(page.locator("[data-role=username]")).to_have_text(username)
        for agent_type in ("researcher", "counter", "chat-talker"):
            link = page.get_by_role("link", name=f"Chat with {agent_type}")
            expect(link).to_have_attribute("href", f"/chat/{agent_type}/")
        screenshot(page, "first-run-landing")
        page.get_by_role("link", name="Admin").click()
        expect(page.get_by_role("heading", name="Site administration")).to_be_visible()
        page.goto("/")
        page.get_by_role("button", name="Sign out").click()
        expect(page.get_by_role("link", name="Sign in").first).to_be_visible()
        expect(page.locator("[data-role=username]")).to_have_count(0)

        chat = browser.new_context(**options).new_page()
        chat.goto("/chat/chat-talker/")
        expect(chat).to_have_url(f"{site}/accounts/login/?next=/chat/chat-talker/")
        screenshot(chat, "sign-in-page")
        sign_in(chat, "chatter", CHATTER_PASSWORD)
        expect(chat).to_have_url(f"{site}/chat/chat-talker/")
        send(chat, "quick hello")
        expect(chat.locator(REPLY)).to_have_text(f"You said quick hello. {STORY}")
        expect(chat.locator(STATUS)).to_have_text("completed")
        expect(chat).to_have_url(re.compile(r"/chat/chat-talker/[0-9a-f]{32}/$"))
        screenshot(chat, "first-run-chat-by-a-user-who-is-not-staff")
        browser.close()
