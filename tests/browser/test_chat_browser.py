"""The chat page in a real browser: Chromium, driven by Playwright, against a live Daphne and a
real Celery worker on this run's test database (and Redis, in the PostgreSQL run).

The agents are `tests.browser.chat_agents`, played by the offline scripted model. Each scenario
saves a screenshot of where it ends under `$HELIX_ARTIFACTS_DIR/screenshots/`.
"""

import re
import time
from collections.abc import Iterator

import pytest
from django.test import Client
from playwright.sync_api import Locator, Page, expect, sync_playwright

from tests.browser.chat_agents import RESUMED, RETRIED, SPEECH, STORY
from tests.browser.pages import CHROMIUM_ARGS, REPLY, STATE, STATUS, screenshot, send
from tests.live_clients import Daphne
from tests.services import chromium_executable

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def page(daphne: Daphne, owner) -> Iterator[Page]:
    """A signed-in browser page on the live site.

    The login is made before Playwright starts: its sync API runs an event loop in this
    thread, and Django refuses ORM calls while one runs. Scenarios only use the browser.
    """
    client = Client()
    client.force_login(owner)
    site = f"http://127.0.0.1:{daphne.port}"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_executable(), args=CHROMIUM_ARGS
        )
        context = browser.new_context(base_url=site, viewport={"width": 1100, "height": 760})
        context.add_cookies(
            [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": site}]
        )
        expect.set_options(timeout=20_000)
        yield context.new_page()
        browser.close()


def wait_for_partial_reply(page: Page, full: str) -> None:
    """Wait until part of the reply, and not all of it, shows."""
    page.wait_for_function(
        """full => {
            const reply = document.querySelector('.helix-msg--assistant .helix-part--text');
            const text = reply ? reply.textContent : '';
            return text.length > 0 && text.length < full.length && full.startsWith(text);
        }""",
        arg=full,
    )


def tool(page: Page, name: str) -> Locator:
    return page.locator(".helix-tool").filter(has=page.locator(".helix-tool__name", has_text=name))


def test_a_sent_message_streams_its_reply_into_the_page(page: Page):
    page.goto("/chat/chat-talker/")
    send(page, "hello")
    full = f"You said hello. {STORY}"

    wait_for_partial_reply(page, full)
    expect(page.locator(STATUS)).to_have_text("running")
    expect(page.locator(REPLY)).to_have_text(full)
    expect(page.locator(STATUS)).to_have_text("completed")
    expect(page.locator(".helix-msg--user")).to_have_text(["hello"])
    expect(page).to_have_url(re.compile(r"/chat/chat-talker/[0-9a-f]{32}/$"))
    screenshot(page, "streamed-reply")


def test_a_reload_mid_stream_ends_with_the_whole_reply_once(page: Page):
    page.goto("/chat/chat-talker/")
    send(page, "quick first")
    first = f"You said quick first. {STORY}"
    expect(page.locator(STATUS)).to_have_text("completed")
    send(page, "reload")
    second = f"You said reload. {STORY}"
    page.wait_for_function(
        """second => {
            const replies = document.querySelectorAll('.helix-msg--assistant');
            const text = replies.length === 2 ? replies[1].textContent : '';
            return text.length > 0 && text.length < second.length;
        }""",
        arg=second,
    )

    page.reload()

    expect(page.locator(STATUS)).to_have_text("running")  # Still streaming after the reload.
    expect(page.locator(STATUS)).to_have_text("completed")
    expect(page.locator(REPLY)).to_have_text([first, second])
    expect(page.locator(".helix-msg--user")).to_have_text(["quick first", "reload"])
    screenshot(page, "reload-mid-stream")


def test_a_dropped_socket_resumes_from_its_last_sequence(page: Page, daphne: Daphne):
    page.goto("/chat/chat-talker/")
    send(page, "drop")
    full = f"You said drop. {STORY}"
    wait_for_partial_reply(page, full)

    daphne.kill()  # The worker goes on writing the reply while no server is there.
    cut = page.locator(REPLY).text_content()
    daphne.start()

    assert full.startswith(cut)
    assert len(cut) < len(full)  # The rest can only come through a new socket.
    expect(page.locator(REPLY)).to_have_text([full])
    expect(page.locator(STATUS)).to_have_text("completed")
    screenshot(page, "dropped-socket")


def test_an_approved_tool_call_runs_and_the_reply_follows(page: Page):
    page.goto("/chat/chat-approver/")
    send(page, "pay")
    transfer = tool(page, "transfer")
    expect(transfer.locator(".helix-tool__state")).to_have_text("awaiting approval")
    expect(page.locator(STATUS)).to_have_text("suspended")

    page.reload()  # The pending call comes back with the page.
    transfer.get_by_role("button", name="Approve").click()

    expect(transfer.locator(".helix-tool__state")).to_have_text("done")
    expect(transfer.locator(".helix-tool__result")).to_have_text(re.compile(r'"sent": 7'))
    expect(page.locator(REPLY)).to_contain_text('Transfer result: {"sent": 7}')
    expect(page.locator(STATUS)).to_have_text("completed")
    expect(transfer.get_by_role("button", name="Approve")).to_have_count(0)
    screenshot(page, "approved-tool-call")


def test_an_answer_whose_response_comes_late_keeps_what_the_stream_told_since(page: Page):
    """The resumed run may run the approved call, and the stream say so, before the answer's
    own response is back: the page keeps the call's result, not its "approved"."""
    page.goto("/chat/chat-approver/")
    send(page, "pay")
    transfer = tool(page, "transfer")
    expect(transfer.locator(".helix-tool__state")).to_have_text("awaiting approval")

    def late(route) -> None:
        response = route.fetch()  # The approval is made; the run goes on meanwhile.
        time.sleep(2)
        route.fulfill(response=response)

    page.route("**/submit-tool-result", late)
    # The page opens a new stream socket once it has the answer's response.
    with page.expect_websocket(lambda socket: "/stream?" in socket.url, timeout=30_000):
        transfer.get_by_role("button", name="Approve").click()

    expect(page.locator(STATUS)).to_have_text("completed")
    expect(transfer.locator(".helix-tool__state")).to_have_text("done")
    screenshot(page, "late-answer")


def test_an_interrupted_reply_resumes_to_completion(page: Page):
    page.goto("/chat/chat-speaker/")
    send(page, "speak")
    wait_for_partial_reply(page, SPEECH)

    page.get_by_role("button", name="Interrupt").click()

    expect(page.locator(STATUS)).to_have_text("interrupted")
    expect(page.locator(".helix-note--interrupted")).to_have_text("Interrupted")
    spoken = page.locator(REPLY).first.text_content()
    assert SPEECH.startswith(spoken)
    assert len(spoken) < len(SPEECH)

    page.get_by_role("button", name="Resume").click()

    expect(page.locator(STATUS)).to_have_text("completed")
    expect(page.locator(REPLY)).to_have_text([spoken, RESUMED])
    screenshot(page, "interrupted-and-resumed")


def test_a_failed_run_is_retried_from_the_page(page: Page):
    page.goto("/chat/chat-flaky/")
    send(page, "try")
    expect(page.locator(STATUS)).to_have_text("failed")
    expect(page.get_by_role("button", name="Retry")).to_be_enabled()

    page.get_by_role("button", name="Retry").click()

    expect(page.locator(STATUS)).to_have_text("completed")
    expect(page.locator(REPLY).last).to_have_text(RETRIED)
    expect(page.get_by_role("button", name="Retry")).to_be_disabled()
    screenshot(page, "retried-run")


def test_a_client_tool_answer_and_the_live_state_show_in_the_page(page: Page):
    page.goto("/chat/chat-counter/")
    send(page, "count")
    expect(page.locator(STATE)).to_have_text(re.compile(r'^\{\s*"count": 0\s*\}$'))
    ask = tool(page, "ask_amount")
    expect(ask.locator(".helix-tool__state")).to_have_text("awaiting result")

    ask.get_by_label("Result of ask_amount").fill("3")
    ask.get_by_role("button", name="Send result").click()

    expect(page.locator(STATE)).to_have_text(re.compile(r'^\{\s*"count": 3\s*\}$'))
    expect(tool(page, "add").locator(".helix-tool__result")).to_have_text(re.compile('"count": 3'))
    expect(page.locator(REPLY)).to_contain_text('Counted: {"count": 3}')
    expect(page.locator(STATUS)).to_have_text("completed")
    screenshot(page, "client-tool-and-state")
