"""The distribution: the wheel holds the three apps and nothing else, and a new Django project
that installs it into a virtualenv of its own, and adds it exactly as README "Add Helix to your
Django project" says (the lines are read from there), runs an agent of its own to the end:
through the REST API, over the stream's WebSocket, on the chat page in Chromium, and in the
admin.
"""

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright
from websockets.sync.client import connect

from tests.browser.pages import CHROMIUM_ARGS
from tests.live import ROOT, free_port
from tests.services import chromium_executable, require

SECTION = "## Add Helix to your Django project"
# What the project adds beside the README's lines: its app's agent is played by the scripted
# model (as `agents_app.demo`'s are), which calls the agent's tool and answers from its result.
SCRIPT = """

import json

from agents_app.llm.scripted import ScriptedToolCall, Turn, register_script
from sessions_app.stores.types import MessageRole


def script(request, context):
    last = request.messages[-1]
    if last.role == MessageRole.USER:
        return Turn(tool_calls=[ScriptedToolCall(name="order_status", arguments={"number": 42})])
    return Turn(text=f"Order 42 is {json.loads(last.content)['status']}.")


register_script("shop-assistant", script)
"""
REPLY = "Order 42 is shipped."
PASSWORD = "a-long-test-password"
IN_THE_WHEEL = {
    "sessions_app/migrations/0001_initial.py",
    "streams_app/migrations/0001_initial.py",
    "agents_app/migrations/0001_initial.py",
    "agents_app/templates/helix/chat/page.html",
    "agents_app/templates/helix/chat/widget.html",
    "agents_app/templates/admin/agents_app/agentsession/change_form.html",
    "agents_app/static/helix/chat.js",
    "agents_app/static/helix/chat.css",
}


def readme_section() -> str:
    text = (ROOT / "README.md").read_text()
    return text.split(f"\n{SECTION}\n", 1)[1].split("\n## ", 1)[0]


def readme_blocks() -> dict[str, str]:
    """Return the section's Python blocks by the file their first line names (`# mysite/...`)."""
    blocks = re.findall(r"```python\n(.*?)```", readme_section(), flags=re.DOTALL)
    return {block.splitlines()[0].removeprefix("# "): block for block in blocks}


def run(*args: object, cwd: Path, env: dict[str, str]) -> str:
    """Run a command to completion and return its output; fail with it unless it succeeds."""
    done = subprocess.run(
        [str(arg) for arg in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    return done.stdout


@contextlib.contextmanager
def started(
    *args: object, cwd: Path, env: dict[str, str], log: Path, ready: Callable[[], bool]
) -> Iterator[None]:
    """Run a server process for the block, which begins once `ready()` says it serves."""
    with log.open("wb") as output:
        process = subprocess.Popen(
            [str(arg) for arg in args],
            cwd=cwd,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Its own process group: stopping it stops its children.
        )
    try:
        deadline = time.monotonic() + 60
        while not ready():
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"Not serving within 60 s:\n{log.read_text()}"
            time.sleep(0.1)
        yield
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def build_wheel(tmp_path: Path) -> Path:
    """Build the wheel from a copy of the work tree (a build writes beside its sources)."""
    source = tmp_path / "source"
    ignored = shutil.ignore_patterns(
        ".git", ".venv", ".venv-peers", "node_modules", "var", "__pycache__", ".*_cache"
    )
    shutil.copytree(ROOT, source, ignore=ignored)
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", dist,
        cwd=source, env=dict(os.environ))  # fmt: skip
    (wheel,) = dist.glob("helix-*.whl")
    return wheel


def make_virtualenv(folder: Path) -> tuple[Path, Path]:
    """Make a virtualenv that sees this run's installed packages, not the repository.

    Return its Python and its site-packages.
    """
    run(sys.executable, "-m", "venv", "--without-pip", folder, cwd=folder.parent, env={})
    python = folder / "bin" / "python"
    paths = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    packages = Path(run(python, "-c", paths, cwd=folder.parent, env={}).strip())
    (packages / "installed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python, packages


def make_project(site: Path, python: Path, env: dict[str, str]) -> None:
    """Make `mysite` in `site` with the README's lines, and its app `shop` with an agent."""
    run(python, "-m", "django", "startproject", "mysite", site, cwd=site.parent, env=env)
    run(python, "-m", "django", "startapp", "shop", cwd=site, env=env)
    blocks = readme_blocks()
    for name in ("mysite/settings.py", "mysite/urls.py", "mysite/asgi.py"):
        with (site / name).open("a") as file:
            file.write("\n" + blocks[name])
    with (site / "mysite/settings.py").open("a") as file:
        file.write('\nINSTALLED_APPS.append("shop")\n')
    for name in ("mysite/celery.py", "mysite/__init__.py"):
        (site / name).write_text(blocks[name])
    (site / "shop/agents.py").write_text(blocks["shop/agents.py"] + SCRIPT)


def stream_events(url: str, token: str) -> list[dict]:
    """Return the events of a session's stream WebSocket, from its first chunk to its end."""
    events: list[dict] = []
    with connect(url, additional_headers={"Authorization": f"Token {token}"}) as stream:
        while not events or events[-1]["type"] not in {"end", "fail"}:
            frame = json.loads(stream.recv(timeout=30))
            events.extend(frame["events"] if frame["type"] == "batch" else [frame])
    return events


@pytest.mark.one_backend("sqlite", reason="installs the wheel into a project on its own SQLite")
def test_a_new_project_adds_the_wheel_as_the_readme_says_and_runs_its_agent(tmp_path: Path):
    require("chromium")
    wheel = build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    metadata = wheel.name.removesuffix("-py3-none-any.whl") + ".dist-info"
    assert {name.split("/")[0] for name in names} == {
        "sessions_app",
        "streams_app",
        "agents_app",
        metadata,
    }
    assert set(names) >= IN_THE_WHEEL

    python, packages = make_virtualenv(tmp_path / "venv")
    site = tmp_path / "site"
    site.mkdir()
    env = {"PATH": f"{python.parent}:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    run(python, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", wheel,
        cwd=site, env=env)  # fmt: skip
    run(python, "-m", "pip", "check", cwd=site, env=env)
    where = "import agents_app, importlib.util; print(agents_app.__file__); "
    where += "print(importlib.util.find_spec('helix_project'))"
    assert run(python, "-c", where, cwd=site, env=env).split() == [
        str(packages / "agents_app" / "__init__.py"),
        "None",
    ]

    make_project(site, python, env)
    run(python, "manage.py", "check", cwd=site, env=env)
    run(python, "manage.py", "migrate", "--noinput", cwd=site, env=env)
    run(python, "manage.py", "createsuperuser", "--noinput", "--username", "admin",
        "--email", "admin@example.com", cwd=site,
        env={**env, "DJANGO_SUPERUSER_PASSWORD": PASSWORD})  # fmt: skip
    token = run(python, "manage.py", "drf_create_token", "admin", cwd=site, env=env).split()[2]

    port, session_id = free_port(), uuid.uuid4().hex
    address, worker_log = f"http://127.0.0.1:{port}", tmp_path / "worker.log"
    env["PYTHONUNBUFFERED"] = "1"
    with (
        started(python, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload",
                cwd=site, env=env, log=tmp_path / "daphne.log", ready=lambda: listening(port)),
        started(python, "-m", "celery", "-A", "mysite", "worker", "--pool", "threads",
                "--concurrency", "4", "--loglevel", "INFO", "--without-mingle",
                "--without-gossip", cwd=site, env=env, log=worker_log,
                ready=lambda: " ready." in worker_log.read_text()),
    ):  # fmt: skip
        api = httpx.Client(base_url=address, headers={"Authorization": f"Token {token}"})
        started_run = api.post(
            f"/api/sessions/{session_id}/start",
            json={"agentType": "shop-assistant", "input": {"message": "Where is order 42?"}},
        )
        assert started_run.status_code == 202, started_run.text

        events = stream_events(started_run.json()["websocketUrl"], token)
        chunks = [event["chunk"] for event in events if event["type"] == "chunk"]
        assert events[-1]["type"] == "end", events[-1]
        (result,) = (chunk for chunk in chunks if chunk["type"] == "tool_result")
        assert result["result"] == {"number": 42, "status": "shipped"}
        assert "".join(c["delta"] for c in chunks if c["type"] == "text_delta") == REPLY
        assert api.get(f"/api/sessions/{session_id}/status").json()["status"] == "completed"

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=chromium_executable(), args=CHROMIUM_ARGS
            )
            page = browser.new_page(base_url=address)
            expect.set_options(timeout=20_000)
            page.goto(f"/chat/shop-assistant/{session_id}/")  # To sign in (LOGIN_URL), and back.
            page.get_by_label("Username").fill("admin")
            page.get_by_label("Password").fill(PASSWORD)
            page.get_by_role("button", name="Log in").click()
            expect(page).to_have_url(f"{address}/chat/shop-assistant/{session_id}/")
            expect(page.locator("[data-role=status]")).to_have_text("completed")
            expect(page.locator(".helix-msg--assistant").last).to_contain_text(REPLY)

            page.goto("/admin/sessions_app/agentsession/")
            expect(page.locator("#result_list")).to_contain_text(session_id)
            page.goto(f"/admin/sessions_app/agentsession/{session_id}/change/")
            expect(page.locator("table.helix-tree")).to_contain_text(REPLY)
            browser.close()


def test_every_helix_key_the_apps_read_is_in_the_readme_with_its_default():
    read = {
        key
        for app in ("sessions_app", "streams_app", "agents_app")
        for module in (ROOT / app).rglob("*.py")
        for key in re.findall(r'(?:helix_setting|load_backend)\(\s*"([A-Z_]+)"', module.read_text())
    }
    rows = re.findall(r"^\| (`[A-Z_]+`.*?) \| (.+?) \|", readme_section(), flags=re.MULTILINE)
    documented = {key for keys, default in rows for key in re.findall(r"`([A-Z_]+)`", keys)}

    assert read == documented
