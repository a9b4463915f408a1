"""What the browser suites share of a page: Chromium's flags, the places in the chat the
scenarios look at, a screenshot kept as an artifact, and sending a message."""

import os
from pathlib import Path

from playwright.sync_api import Page

from tests.live import ROOT

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# The places in the chat the scenarios look at.
STATUS = "[data-role=status]"
REPLY = ".helix-msg--assistant"
STATE = "[data-role=state]"


def screenshot(page: Page, name: str) -> None:
    folder = Path(os.environ.get("HELIX_ARTIFACTS_DIR") or ROOT / "var" / "test-artifacts")
    (folder / "screenshots").mkdir(parents=True, exist_ok=True)
    page.screenshot(path=folder / "screenshots" / f"{name}.png", full_page=True)


def send(page: Page, message: str) -> None:
    page.get_by_label("Message").fill(message)
    page.get_by_role("button", name="Send").click()
