"""The embedded broker: kombu's filesystem transport, with messages written atomically."""

import threading
import time

import pytest
from kombu import Connection
from kombu.transport import filesystem
from kombu.transport.virtual import Empty
from kombu.utils.json import dumps

from agents_app import broker
from tests.helix_project.test_settings import run_shell


def slow_dumps(payload) -> str:
    time.sleep(0.2)  # A producer descheduled mid-put, as on a loaded machine.
    return dumps(payload)


@pytest.fixture
def folders(tmp_path) -> dict:
    return {
        "data_folder_in": str(tmp_path / "data"),
        "data_folder_out": str(tmp_path / "data"),
        "control_folder": str(tmp_path / "control"),
    }


def test_the_embedded_mode_uses_it_and_a_redis_broker_does_not(tmp_path):
    script = (
        "from helix_project.celery import app; "
        "print(type(app.connection_for_write().transport).__module__)"
    )

    embedded = run_shell(script, tmp_path=tmp_path)
    served = run_shell(script, tmp_path=tmp_path, REDIS_URL="redis://127.0.0.1:6379/3")

    assert embedded.stdout.split() == ["agents_app.broker"], embedded.stderr
    assert served.stdout.split() == ["kombu.transport.redis"], served.stderr


def test_a_consumer_polling_during_a_put_never_takes_a_half_written_message(folders, monkeypatch):
    monkeypatch.setattr(broker, "dumps", slow_dumps)
    monkeypatch.setattr(filesystem, "dumps", slow_dumps)  # kombu's own Channel fails here.
    taken: list = []
    failures: list = []

    def poll(channel) -> None:
        deadline = time.monotonic() + 10
        while len(taken) < 3 and not failures and time.monotonic() < deadline:
            try:
                taken.append(channel._get("steps"))
            except Empty:
                continue
            except Exception as error:
                failures.append(error)

    with (
        Connection("filesystem://", transport=broker.Transport, transport_options=folders) as a,
        Connection("filesystem://", transport=broker.Transport, transport_options=folders) as b,
    ):
        poller = threading.Thread(target=poll, args=(b.default_channel,))
        poller.start()
        for step in range(3):
            a.default_channel._put("steps", {"step": step})
        poller.join()

    assert failures == []
    assert sorted(message["step"] for message in taken) == [0, 1, 2]


def test_a_site_that_names_folders_not_yet_made_gets_them_made(folders, tmp_path):
    with Connection("filesystem://", transport=broker.Transport, transport_options=folders) as a:
        a.default_channel._put("steps", {"step": 1})
        taken = a.default_channel._get("steps")

    assert taken == {"step": 1}
    assert (tmp_path / "data").is_dir()
    assert (tmp_path / "control").is_dir()
