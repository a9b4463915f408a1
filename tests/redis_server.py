"""A redis-server of a test's own, with a password, that can be killed and started again on the
same port (the `private_redis` fixture in `tests/conftest.py`)."""

import subprocess
import time
from pathlib import Path

import redis

from tests.live import free_port


class RedisServer:
    """A private redis-server without persistence: a restart empties it."""

    PASSWORD = "s3cret-private-redis-pw"

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.url = f"redis://:{self.PASSWORD}@127.0.0.1:{self.port}/0"
        self.directory = directory
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        """Start redis-server and return once it answers."""
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--requirepass", self.PASSWORD,
             "--save", "", "--appendonly", "no", "--daemonize", "no",
             "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis.from_url(self.url, socket_connect_timeout=1).ping()
                return
            except redis.ConnectionError:
                assert self.process.poll() is None, "redis-server exited on start"
                assert time.monotonic() < deadline, "redis-server did not answer within 10 s"
                time.sleep(0.05)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
