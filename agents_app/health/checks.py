"""What "ready" means: every dependency a request or a run needs answers, within a short time.

- `database`: each configured database takes a new connection (not a pooled one) and answers
  `SELECT 1`.
- `migrations`: no migration is left to apply. Checked until it first holds, then taken as
  held for the life of the process: it cannot stop holding without a deploy.
- `channelLayer`: the default channel layer carries a message to a new channel and back; the
  Redis pub/sub layer, whose new channels stay subscribed, publishes one instead.
- `broker`: the Celery app's broker takes a connection (the filesystem broker of the embedded
  mode always does).

`readiness` runs them all at once, each within its own timeout, so that a dependency that
hangs costs the caller that long and no more. Blocking checks run on a few threads of their
own: a hung one cannot starve the threads that serve requests.
"""

import asyncio
import contextlib
import copy
import functools
import logging
import math
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

from asgiref.sync import iscoroutinefunction
from celery import current_app
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.migrations.executor import MigrationExecutor

logger = logging.getLogger(__name__)

# The user information of a URL (`user:password@`) in an error message.
_URL_CREDENTIALS = re.compile(r"(?<=://)[^/@\s]+@")
_migrated: set[str] = set()  # The database aliases found with every migration applied.


class NotReady(Exception):
    """A dependency answered, but not as a ready one does."""


@dataclass(frozen=True, kw_only=True)
class CheckResult:
    """How one check went: `error` says why it failed."""

    name: str
    ok: bool
    seconds: float
    error: str | None = None


def database_reachable(timeout: float) -> None:
    """Connect anew to every configured database and run `SELECT 1`."""
    for alias in connections:
        with _fresh_connection(alias, timeout) as connection, connection.cursor() as cursor:
            cursor.execute("SELECT 1")


def migrations_applied(timeout: float) -> None:
    """Raise `NotReady` naming the migrations some database still lacks."""
    for alias in connections:
        if alias in _migrated:
            continue
        with _fresh_connection(alias, timeout) as connection:
            executor = MigrationExecutor(connection)
            plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
        if plan:
            names = ", ".join(f"{migration.app_label}.{migration.name}" for migration, _ in plan)
            raise NotReady(f"database {alias!r} lacks {len(plan)} migration(s): {names}")
        _migrated.add(alias)


async def channel_layer_reachable(timeout: float) -> None:
    """Send a message through the default channel layer to a new channel and receive it."""
    layer = get_channel_layer()
    if layer is None:
        raise NotReady("CHANNEL_LAYERS configures no default layer")
    message = {"type": "helix.readiness", "id": uuid.uuid4().hex}
    if type(layer).__module__ == "channels_redis.pubsub":
        await layer.send(f"helix.readiness.{message['id']}", message)
        return
    channel = await layer.new_channel()
    await layer.send(channel, message)
    if await layer.receive(channel) != message:
        raise NotReady("the channel layer delivered another message than the one sent")


def broker_reachable(timeout: float) -> None:
    """Connect to the Celery broker once, without retrying."""
    with current_app.connection_for_write(connect_timeout=timeout) as connection:
        connection.ensure_connection(max_retries=0)


CHECKS: dict[str, Callable[[float], Awaitable[None] | None]] = {
    "database": database_reachable,
    "migrations": migrations_applied,
    "channelLayer": channel_layer_reachable,
    "broker": broker_reachable,
}


async def readiness(*, timeout: float) -> list[CheckResult]:
    """Run every check at once and return their results, each within `timeout` seconds."""
    return list(await asyncio.gather(*(_run(name, timeout) for name in CHECKS)))


async def _run(name: str, timeout: float) -> CheckResult:
    check = CHECKS[name]
    started = time.monotonic()
    try:
        async with asyncio.timeout(timeout):
            if iscoroutinefunction(check):
                await check(timeout)
            else:
                await asyncio.get_running_loop().run_in_executor(_executor(), check, timeout)
    except TimeoutError:
        error = f"no answer within {timeout:g} s"
    except Exception as failure:  # Whatever it is, the dependency is not ready: say why.
        error = _redacted(f"{type(failure).__name__}: {failure}")
    else:
        return CheckResult(name=name, ok=True, seconds=time.monotonic() - started)
    logger.warning("Readiness check %s failed: %s", name, error)
    return CheckResult(name=name, ok=False, seconds=time.monotonic() - started, error=error)


@functools.cache
def _executor() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=4, thread_name_prefix="helix-readiness")


@contextlib.contextmanager
def _fresh_connection(alias: str, timeout: float) -> Iterator[BaseDatabaseWrapper]:
    """Yield a new connection to database `alias`, outside any pool, and close it after.

    It is this thread's connection to `alias` meanwhile, so that the ORM queries it too.
    """
    configured = connections[alias]
    settings_dict = copy.deepcopy(configured.settings_dict)
    options = settings_dict.setdefault("OPTIONS", {})
    options.pop("pool", None)
    if configured.vendor == "postgresql":
        options["connect_timeout"] = max(1, math.ceil(timeout))
    fresh = type(configured)(settings_dict, alias)
    connections[alias] = fresh
    try:
        yield fresh
    finally:
        fresh.close()
        connections[alias] = configured


def _redacted(text: str) -> str:
    """Return `text` without the credentials of any URL or configured service in it."""
    text = _URL_CREDENTIALS.sub("***@", text)
    for secret in _secrets():
        text = text.replace(secret, "***")
    return text


def _secrets() -> Iterator[str]:
    for database in settings.DATABASES.values():
        if database.get("PASSWORD"):
            yield str(database["PASSWORD"])
    urls = [str(current_app.conf.broker_url or "")]
    for layer in getattr(settings, "CHANNEL_LAYERS", {}).values():
        for host in layer.get("CONFIG", {}).get("hosts", []):
            if isinstance(host, dict):
                urls.append(str(host.get("address", "")))
                if host.get("password"):
                    yield str(host["password"])
            else:
                urls.append(str(host))
    for url in urls:
        try:
            parts = urlsplit(url)
        except ValueError:
            continue
        if parts.password:
            yield parts.password
