"""The brokers' transports: the embedded mode's filesystem transport, with messages written
atomically and a worker that stops at once, and the Redis transport, whose channels send their
commands through one client."""

import threading
import time

import pytest
from celery.worker import state as worker_state
from django.conf import settings
from kombu import Connection, Queue
from kombu.transport import filesystem
from kombu.transport.virtual import Empty
from kombu.utils.json import dumps

from agents_app import broker
from tests.agents_app.worker import Worker
from tests.helix_project.environment import ENVIRONMENT_ONLY, run_shell
from tests.services import require


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


@ENVIRONMENT_ONLY
def test_each_broker_url_gets_its_transport(tmp_path):
    script = (
        "from helix_project.celery import app; "
        "kind = type(app.connection_for_write().transport); "
        "print(f'{kind.__module__}.{kind.__qualname__}')"
    )

    def transport(**env: str) -> list[str]:
        found = run_shell(script, tmp_path=tmp_path, **env)
        assert found.returncode == 0, found.stderr
        return found.stdout.split()

    assert transport() == ["agents_app.broker.Transport"]  # The embedded mode's filesystem.
    redis = ["agents_app.broker.RedisTransport"]
    assert transport(REDIS_URL="redis://127.0.0.1:6379/3") == redis
    assert transport(CELERY_BROKER_URL="rediss://127.0.0.1:6380/3") == redis
    # Redis through Sentinels keeps kombu's transport.
    sentinels = transport(CELERY_BROKER_URL="sentinel://127.0.0.1:26379/3")
    assert sentinels == ["kombu.transport.redis.SentinelTransport"]


def test_a_redis_channel_sends_its_commands_through_one_client_and_delivers_what_it_sends():
    require("redis")
    queue = Queue(f"helix-test-broker-{time.time_ns()}")
    with Connection(settings.REDIS_URL, transport=broker.RedisTransport) as connection:
        channel = connection.default_channel
        with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
            assert first is second
        producer = connection.Producer(channel)
        for step in range(3):
            producer.publish({"step": step}, routing_key=queue.name, declare=[queue])
        # kombu drops a channel's connection pool after a connection error: a new client
        # then serves the new pool.
        channel._disconnect_pools()
        with channel.conn_or_acquire() as after:
            assert after is not first
            assert after.connection_pool is channel.pool
        producer.publish({"step": 3}, routing_key=queue.name, declare=[queue])

        consumer = connection.SimpleQueue(queue)
        try:
            taken = [consumer.get(timeout=5) for _ in range(4)]
            for message in taken:
                message.ack()
        finally:
            consumer.queue.delete()
            consumer.close()

    assert [message.payload["step"] for message in taken] == [0, 1, 2, 3]


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


def test_draining_the_filesystem_broker_waits_its_timeout_unless_the_worker_is_asked_to_stop(
    folders, monkeypatch
):
    monkeypatch.setattr(worker_state, "should_stop", None)  # Restored whatever the test sets.
    queue = Queue(f"helix-test-drain-{time.time_ns()}")
    delivered: list = []
    with (
        Connection("filesystem://", transport=broker.Transport, transport_options=folders) as a,
        Connection("filesystem://", transport=broker.Transport, transport_options=folders) as b,
        a.Consumer(queue, callbacks=[lambda body, message: delivered.append(body)]),
    ):
        began = time.monotonic()
        with pytest.raises(TimeoutError):
            a.drain_events(timeout=0.5)  # Nothing comes: it waits its whole timeout.
        assert time.monotonic() - began >= 0.5

        # A message put while it waits is delivered, though the wait is cut in short looks.
        publish = b.Producer().publish
        threading.Timer(0.35, publish, ({"step": 1},), {"routing_key": queue.name}).start()
        a.drain_events(timeout=10)
        assert delivered == [{"step": 1}]

        # Asked to stop (warm, as SIGTERM asks; its exit code 0), it gives up waiting at once.
        threading.Timer(0.3, setattr, (worker_state, "should_stop", 0)).start()
        began = time.monotonic()
        with pytest.raises(TimeoutError):
            a.drain_events(timeout=10)
        assert time.monotonic() - began < 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.one_backend("sqlite", reason="the filesystem broker is the embedded default's")
def test_a_worker_on_the_filesystem_broker_stops_promptly(tmp_path):
    worker = Worker(tmp_path, CELERY_BROKER_URL="filesystem://").start()

    began = time.monotonic()
    worker.stop()

    assert worker.process.returncode == 0, worker.read_log()
    assert time.monotonic() - began < 2.5, worker.read_log()  # 4.4 s before; about 0.5 now.
