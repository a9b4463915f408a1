"""Which backing services a test run has, and what a test does when one is missing.

Tests that need a service skip with a printed reason when it is unreachable. `.ci/run` sets
``HELIX_REQUIRE_SERVICES`` (e.g. ``postgres,redis``) so that there a missing service fails the
run instead of silently skipping a backend suite.
"""

import os

import kombu
import psycopg
import pytest
import redis
from django.conf import settings

REQUIRED_SERVICES = frozenset(
    name.strip() for name in os.environ.get("HELIX_REQUIRE_SERVICES", "").split(",") if name.strip()
)


def database_vendor() -> str:
    """Return `postgresql` or `sqlite`: the vendor of this run's default database."""
    engine = settings.DATABASES["default"]["ENGINE"]
    return "postgresql" if "postgresql" in engine else engine.rsplit(".", 1)[-1]


def postgres_problem() -> str | None:
    """Return why this run has no reachable PostgreSQL, or `None` if it has one."""
    if database_vendor() != "postgresql":
        return f"this run's DATABASE_URL is {database_vendor()}, not PostgreSQL"
    database = settings.DATABASES["default"]
    try:
        psycopg.connect(
            host=database["HOST"] or None,
            port=database["PORT"] or None,
            user=database["USER"] or None,
            password=database["PASSWORD"] or None,
            dbname="postgres",
            connect_timeout=3,
        ).close()
    except psycopg.OperationalError as error:
        return f"PostgreSQL at {database['HOST']}:{database['PORT']} is unreachable ({error})"
    return None


def redis_problem() -> str | None:
    """Return why this run has no reachable Redis, or `None` if it has one."""
    if not settings.REDIS_URL:
        return "REDIS_URL is not set"
    try:
        redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=3).ping()
    except redis.RedisError as error:
        return f"Redis at {settings.REDIS_URL} is unreachable ({error})"
    return None


def chromium_executable() -> str:
    """Return the Chromium the browser tests drive (`HELIX_CHROMIUM`, Debian's by default)."""
    return os.environ.get("HELIX_CHROMIUM") or "/usr/bin/chromium"


def chromium_problem() -> str | None:
    """Return why this run has no Chromium to drive, or `None` if it has one."""
    executable = chromium_executable()
    if not os.access(executable, os.X_OK):
        return f"no Chromium executable at {executable} (set HELIX_CHROMIUM)"
    return None


# The RabbitMQ broker the broker tests run on (`.ci/run` starts it).
RABBITMQ_URL = os.environ.get("HELIX_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//")


def rabbitmq_problem() -> str | None:
    """Return why this run has no reachable RabbitMQ, or `None` if it has one."""
    try:
        with kombu.Connection(RABBITMQ_URL, connect_timeout=3) as broker:
            broker.ensure_connection(max_retries=1)
    except Exception as error:  # kombu raises the transport's own errors.
        return f"RabbitMQ at {RABBITMQ_URL} is unreachable ({error})"
    return None


PROBLEMS = {
    "postgres": postgres_problem,
    "redis": redis_problem,
    "rabbitmq": rabbitmq_problem,
    "chromium": chromium_problem,
}


def require(service: str) -> None:
    """Skip the calling test unless `service` is reachable; fail instead where CI requires it."""
    problem = PROBLEMS[service]()
    if problem is None:
        return
    if service in REQUIRED_SERVICES:
        pytest.fail(f"{service} is required in this run (HELIX_REQUIRE_SERVICES) but {problem}")
    pytest.skip(f"{service}: {problem}")
