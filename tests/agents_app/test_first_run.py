"""The first start: a superuser made only on a database without users, its login printed by
`manage.py serve` once, and the site's addresses printed on every start. The login at work in a
browser: `tests/browser/test_first_run_browser.py`."""

import re
import signal
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth import authenticate

from agents_app.definitions.registry import get_registry
from agents_app.management.commands.serve import Command
from agents_app.operations.first_run import FirstLogin, first_superuser_create
from tests.agents_app.serving import Serve, embedded_env
from tests.helix_project.environment import manage
from tests.live import free_port

pytestmark = pytest.mark.django_db

SITE = "http://127.0.0.1:8000"
# Whether a username and password sign in as a staff superuser, asked of serve's database.
AUTHENTICATE = """
from django.contrib.auth import authenticate
user = authenticate(username={username!r}, password={password!r})
print(user is not None and user.is_staff and user.is_superuser)
"""


def addresses() -> list[str]:
    """Return the landing page, a chat page (the first agent's), the admin and the API docs."""
    first_agent = get_registry().registered_types()[0]
    return [f"{SITE}/", f"{SITE}/chat/{first_agent}/", f"{SITE}/admin/", f"{SITE}/api/docs/"]


def printed_login(output: str) -> tuple[str, str]:
    return (
        re.search(r"^\s*username\s+(\S+)$", output, re.MULTILINE)[1],
        re.search(r"^\s*password\s+(\S+)$", output, re.MULTILINE)[1],
    )


def welcome(login: FirstLogin | None) -> str:
    printed = StringIO()
    Command(stdout=printed).welcome(site=SITE, login=login)
    return printed.getvalue()


def test_a_database_without_users_gets_one_staff_superuser_whose_password_signs_in(
    django_user_model,
):
    login = first_superuser_create()

    assert login.username == "admin"
    assert len(login.password) >= 20
    user = django_user_model.objects.get()
    assert (user.username, user.is_staff, user.is_superuser) == ("admin", True, True)
    assert authenticate(username="admin", password=login.password) == user
    assert login.password not in repr(login)


def test_a_database_with_a_user_gets_no_superuser(django_user_model, owner):
    assert first_superuser_create() is None

    assert list(django_user_model.objects.all()) == [owner]


def test_a_second_start_creates_nobody_and_a_fresh_database_gets_a_fresh_password(
    django_user_model,
):
    first = first_superuser_create()

    assert first_superuser_create() is None
    assert django_user_model.objects.count() == 1
    django_user_model.objects.all().delete()
    assert first_superuser_create().password != first.password


def test_the_first_start_prints_the_login_the_addresses_and_how_to_make_more_users():
    login = first_superuser_create()

    output = welcome(login)

    assert printed_login(output) == ("admin", login.password)
    assert authenticate(username="admin", password=printed_login(output)[1]) is not None
    for url in [*addresses(), f"{SITE}/accounts/login/", f"{SITE}/admin/auth/user/add/"]:
        assert url in output
    assert "manage.py createsuperuser" in output


def test_a_later_start_prints_the_addresses_and_no_login(owner):
    output = welcome(first_superuser_create())

    for url in addresses():
        assert url in output
    assert "password" not in output
    assert "createsuperuser" not in output


@pytest.mark.one_backend("sqlite", reason="serve runs the embedded default whatever the run's")
def test_serve_prints_the_login_on_its_first_start_only(serve: Serve, tmp_path: Path):
    serve.wait_for(lambda: "daphne pid" in serve.output(), 60, "serve started its children")
    first = serve.output()
    username, password = printed_login(first)
    script = AUTHENTICATE.format(username=username, password=password)
    signs_in = manage("shell", "-v", "0", "-c", script, env=serve.env)
    assert signs_in.stdout.split() == ["True"], signs_in.stdout + signs_in.stderr
    assert f"{serve.site}/chat/counter/" in first
    serve.process.send_signal(signal.SIGINT)
    serve.process.wait(timeout=30)

    again = Serve(serve.env, free_port(), tmp_path / "again.log")
    try:
        again.wait_for(lambda: "daphne pid" in again.output(), 60, "serve started again")
        second = again.output()
    finally:
        again.kill()

    assert f"Helix is starting at {again.site}/" in second
    assert f"{again.site}/api/docs/" in second
    assert password not in second
    assert "password" not in second


@pytest.mark.one_backend("sqlite", reason="serve runs the embedded default whatever the run's")
def test_serve_on_an_unmigrated_database_says_to_migrate_and_starts_nothing(tmp_path: Path):
    result = manage("serve", "--port", str(free_port()), env=embedded_env(tmp_path / "var"))

    assert result.returncode == 1
    assert "run `python manage.py migrate` first" in result.stderr
    assert "pid" not in result.stdout
