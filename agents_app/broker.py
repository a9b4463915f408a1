"""The Celery broker: the settings each kind of broker gets, and two transports.

`celery_settings` suits Celery to the broker's URL: Redis (the visibility timeout and the sweep
that hands a dead worker's steps to another), RabbitMQ (quorum queues, publisher confirms), or
the filesystem broker of the embedded mode, a broker without a server for one machine.

The Redis transport (``"agents_app.broker:RedisTransport"``, which `celery_settings` names for
``redis://`` and ``rediss://`` URLs) is kombu's, but for one thing: a channel sends its commands
through one redis-py client, where kombu's builds a new client for each, its table of reply
parsers filled anew every time. That was a quarter of the CPU Celery spends sending a step
(0.56 ms became 0.43 ms). A client holds nothing but the channel's connection pool, so sharing
it changes nothing else; when kombu replaces the pool (after a connection error), a new client
serves the new pool.

That filesystem broker (``CELERY_BROKER_TRANSPORT = "agents_app.broker:Transport"``) is
kombu's, with its files written atomically, its folders made when missing, and a poll every
0.1 s rather than every second. kombu's own creates a message file, then locks and writes it,
while `_get` takes any file with the queue's name without a lock; and the first binding to an
exchange creates its table file the same way, while another binding reads it under the lock. A
worker at the wrong moment reads an empty file, fails to decode it and stops ("Unrecoverable
error: JSONDecodeError"). Here a file is written whole under a name nothing reads, then moved
into place. And a worker draining it stops within a tenth of a second of being asked: Celery's
loop for brokers like it, which have no event loop, drains for 2 s between its looks at a stop,
and once more after the look that saw one, so a worker of the embedded mode took 4 s to stop
(`manage.py serve` at Ctrl-C, and every test's worker).
"""

import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from celery.worker import state as worker_state
from kombu.exceptions import ChannelError
from kombu.transport import filesystem, redis
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

AMQP_SCHEMES = ("amqp://", "amqps://", "pyamqp://")
REDIS_SCHEMES = ("redis://", "rediss://")
# How often a worker draining the filesystem broker looks whether it was asked to stop.
STOP_LOOK_SECONDS = 0.1


def celery_settings(url: str, *, visibility_timeout: int, var_dir: Path) -> dict[str, object]:
    """Return the Celery settings (Celery's own names) that suit the broker at `url`."""
    if url.startswith(AMQP_SCHEMES):
        return {
            # Replicated and persistent queues, in RabbitMQ's recommended type. Celery sees
            # them, turns global QoS off, and delays retries (`countdown`) in the broker
            # through topic exchanges rather than holding them in a worker's memory.
            "task_default_queue_type": "quorum",
            "task_create_missing_queue_type": "quorum",
            "task_default_exchange_type": "topic",
            "task_create_missing_queue_exchange_type": "topic",
            # A step's next task is enqueued only once the broker has it on disk.
            "broker_transport_options": {"confirm_publish": True},
        }
    restore_interval = max(1, min(10, visibility_timeout // 2))
    options = {
        # Seconds before the Redis broker hands a dead worker's unacknowledged step to
        # another; workers sweep for such steps every half of it, at most every 10 s.
        "visibility_timeout": visibility_timeout,
        "unacked_restore_interval": restore_interval,
        "unacked_restore_throttle": 1,
        # One worker sweeps at a time, under a lock in Redis. A worker killed while it sweeps
        # leaves the lock behind until it expires: kombu's five minutes would stop every sweep.
        "unacked_mutex_expire": restore_interval,
    }
    if url.startswith(REDIS_SCHEMES):
        return {
            "broker_transport": "agents_app.broker:RedisTransport",
            "broker_transport_options": options,
        }
    if not url.startswith("filesystem://"):  # Redis through Sentinels, say: kombu's own.
        return {"broker_transport_options": options}
    broker_dir, control_dir = var_dir / "broker", var_dir / "broker-control"
    return {
        "broker_transport": "agents_app.broker:Transport",  # Writes messages atomically.
        # The timer thread of a worker without an event loop sleeps up to this long, and a
        # worker stopping waits for it: 1 s by default.
        "worker_timer_precision": STOP_LOOK_SECONDS,
        "broker_transport_options": options
        | {
            "data_folder_in": str(broker_dir),
            "data_folder_out": str(broker_dir),
            "control_folder": str(control_dir),
            "polling_interval": 0.05,
        },
    }


class Channel(filesystem.Channel):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        for folder in (self.data_folder_in, self.data_folder_out, self.control_folder):
            Path(folder).mkdir(parents=True, exist_ok=True)  # kombu expects them to exist.

    def _put(self, queue: str, payload: dict, **kwargs: object) -> None:
        """Put a message on `queue`: written in full, then made visible at once."""
        # Wall-clock nanoseconds keep names in the order they were put across processes.
        name = f"{time.time_ns()}_{uuid.uuid4()}.{queue}.msg"
        path = os.path.join(self.data_folder_out, name)
        partial = f"{path}.partial"  # `_get` reads only names ending in `.<queue>.msg`.
        body = str_to_bytes(dumps(payload))
        try:
            with open(partial, "wb") as file:
                file.write(body)
            os.replace(partial, path)
        except OSError as error:
            raise ChannelError(f"Cannot add file {path!r} to directory") from error

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        """Bind as kombu does, once the exchange's table file exists with a valid table."""
        table = self._exchange_file(exchange)
        self.control_folder.mkdir(exist_ok=True)
        if not table.exists():
            partial = table.with_name(f"{table.name}.{uuid.uuid4()}.partial")
            partial.write_bytes(str_to_bytes(dumps([])))
            try:
                os.link(partial, table)  # Creates it only if no other binding did first.
            except FileExistsError:
                pass
            finally:
                partial.unlink()
        super()._queue_bind(exchange, routing_key, pattern, queue)


class Transport(filesystem.Transport):
    Channel = Channel
    polling_interval = 0.1

    def drain_events(self, connection, timeout: float | None = None) -> None:
        """Deliver a message as kombu's does, waiting at most `timeout` seconds, in looks of
        `STOP_LOOK_SECONDS`; once this process's worker is asked to stop, raise `TimeoutError`
        (`socket.timeout`) at the next look. A wait without a timeout is kombu's own.
        """
        if timeout is None:
            return super().drain_events(connection)
        deadline = time.monotonic() + timeout
        while not _stopping():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                return super().drain_events(connection, timeout=min(left, STOP_LOOK_SECONDS))
            except TimeoutError:  # Nothing came yet.
                continue
        raise TimeoutError


def _stopping() -> bool:
    """Return whether this process's Celery worker was asked to stop (warm or cold)."""
    flags = (worker_state.should_stop, worker_state.should_terminate)
    return any(flag is not None and flag is not False for flag in flags)


class RedisChannel(redis.Channel):
    _commands_client = None

    @contextmanager
    def conn_or_acquire(self, client=None) -> Iterator:
        """Yield `client`, or the client this channel sends its commands through."""
        if client:
            yield client
            return
        shared = self._commands_client
        if shared is None or shared.connection_pool is not self.pool:
            shared = self._commands_client = self._create_client()
        yield shared


class RedisTransport(redis.Transport):
    Channel = RedisChannel
