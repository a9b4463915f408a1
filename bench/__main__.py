"""Run every benchmark on a throwaway PostgreSQL database: `python -m bench [--quick]`.

A full run's memory benchmark keeps its large data sets in a database of their own for the next
run (`bench.corpus`).
"""

import argparse
import os
import platform
import signal
import sys
from collections.abc import Sequence
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

import django
import psycopg
import redis
from django.db import connection
from django.test.utils import override_settings

from bench import database_url, redis_url
from bench.harness import Options, Table, summary

DEFAULT_ITERATIONS = 500
QUICK_ITERATIONS = 10
DEFAULT_DELIVERIES = 200
QUICK_DELIVERIES = 10
DEFAULT_PAUSE_MS = 20.0
DEFAULT_HISTORY_MESSAGES = 100_000
QUICK_HISTORY_MESSAGES = 2_000
DEFAULT_SEARCH_MESSAGES = 1_000_000
QUICK_SEARCH_MESSAGES = 20_000


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmarks; return 1 if a full run misses a target."""
    args = _parse_args(argv)
    iterations = args.iterations or (QUICK_ITERATIONS if args.quick else DEFAULT_ITERATIONS)
    options = Options(
        iterations=iterations,
        warmup=max(2, iterations // 10),
        show_sql=args.show_sql,
        deliveries=args.deliveries or (QUICK_DELIVERIES if args.quick else DEFAULT_DELIVERIES),
        pause=args.pause_ms / 1000,
        quick=args.quick,
        history_messages=args.history_messages
        or (QUICK_HISTORY_MESSAGES if args.quick else DEFAULT_HISTORY_MESSAGES),
        search_messages=args.search_messages
        or (QUICK_SEARCH_MESSAGES if args.quick else DEFAULT_SEARCH_MESSAGES),
    )
    url = database_url()
    if os.environ.get("DATABASE_URL", url) != url:
        print(f"DATABASE_URL does not name PostgreSQL; benchmarking on {url} instead.")
    os.environ["DATABASE_URL"] = url
    # Before django.setup(): with REDIS_URL, settings pick the production channel layer.
    os.environ["REDIS_URL"] = redis_url()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "helix_project.settings")
    django.setup()
    # Their models need the app registry that django.setup() fills.
    from bench import (
        admin,
        inflight,
        instructions,
        memory,
        model_stream,
        peers,
        reaping,
        scaleout,
        state,
        steps,
        stores,
        streams,
    )

    database = connection.settings_dict
    if connection.vendor != "postgresql":
        sys.exit(f"bench: needs PostgreSQL; DATABASE_URL gives {connection.vendor}.")
    _check_reachable(database)
    redis_at = _check_redis(os.environ["REDIS_URL"])
    print(
        f"PostgreSQL at {database['HOST']}:{database['PORT']}, Redis at {redis_at}; "
        "each ratio = our slowdown vs the raw side left of it."
    )

    signal.signal(signal.SIGTERM, _exit_on_signal)
    database_name = database["NAME"]
    database["TEST"]["NAME"] = f"test_{database_name}_bench_{os.getpid()}"
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    measured: list[Table] = []
    try:
        # The debug cursor records every query; time the one production uses.
        with override_settings(DEBUG=False):
            modules = {
                "stores": stores,
                "streams": streams,
                "state": state,
                "steps": steps,
                "inflight": inflight,
                "instructions": instructions,
                "model-stream": model_stream,
                "scaleout": scaleout,
                "memory": memory,
                "reaping": reaping,
                "admin": admin,
                "peers": peers,
            }
            for module in (modules[name] for name in args.only or modules):
                print(module.LEGEND + "\n")
                # The peers set the steps benchmark's raw floor with no hop beside theirs.
                tables = peers.run(options, measured) if module is peers else module.run(options)
                # Closing a generator cut short by a failure or SIGTERM stops what it started.
                with closing(tables) as tables:
                    for table in tables:
                        print(table.render() + "\n", flush=True)
                        measured.append(table)
    finally:
        connection.creation.destroy_test_db(database_name, verbosity=0)
    print("Summary (Markdown, for the README's performance section):\n")
    print(summary(measured, _machine(connection)) + "\n")
    missed = [
        f"{table.title}: {row.metric}" for table in measured for row in table.rows if not row.passed
    ]
    if args.quick:
        print("Quick run: targets are not enforced.")
        return 0
    if missed:
        print("Targets missed:\n  " + "\n  ".join(missed))
        return 1
    print("All targets met.")
    return 0


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=(
            "Compare Helix's stores, streams, live state and memory reads with raw psycopg "
            "and Redis."
        ),
    )
    parser.add_argument(
        "--iterations",
        type=_at_least_two,
        help=f"timed runs per side and benchmark (default {DEFAULT_ITERATIONS}, "
        f"{QUICK_ITERATIONS} with --quick); a tenth as many warm up first",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a short smoke run; targets are not enforced"
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=(
            "stores",
            "streams",
            "state",
            "steps",
            "inflight",
            "instructions",
            "model-stream",
            "scaleout",
            "memory",
            "reaping",
            "admin",
            "peers",
        ),
        help="run only this benchmark (repeatable); all by default",
    )
    parser.add_argument(
        "--show-sql", action="store_true", help="print the SQL each operation runs on both sides"
    )
    parser.add_argument(
        "--deliveries",
        type=_at_least_two,
        help="timed stream writes per delivery side, and state rounds per state side "
        f"(default {DEFAULT_DELIVERIES}, {QUICK_DELIVERIES} with --quick)",
    )
    parser.add_argument(
        "--pause-ms",
        type=float,
        default=DEFAULT_PAUSE_MS,
        help="pause after each delivered stream or state write (default %(default)g)",
    )
    parser.add_argument(
        "--history-messages",
        type=int,
        help=f"messages in the memory benchmark's long conversation (default "
        f"{DEFAULT_HISTORY_MESSAGES:,}, {QUICK_HISTORY_MESSAGES:,} with --quick)",
    )
    parser.add_argument(
        "--search-messages",
        type=int,
        help=f"messages in the memory benchmark's search corpus (default "
        f"{DEFAULT_SEARCH_MESSAGES:,}, {QUICK_SEARCH_MESSAGES:,} with --quick); full runs keep "
        "it for the next",
    )
    return parser.parse_args(argv)


def _at_least_two(value: str) -> int:
    """Parse a run count; percentiles need at least two runs."""
    number = int(value)
    if number < 2:
        raise argparse.ArgumentTypeError("needs at least 2 runs for percentiles")
    return number


def _check_reachable(database: dict[str, Any]) -> None:
    """Exit with the reason if the PostgreSQL server of `database` does not answer."""
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
        sys.exit(
            f"bench: PostgreSQL at {database['HOST']}:{database['PORT']} is unreachable: {error}"
        )


def _check_redis(url: str) -> str:
    """Return where the Redis at `url` listens; exit with the reason if it does not answer."""
    where = f"{urlsplit(url).hostname}:{urlsplit(url).port or 6379}"  # Without credentials.
    try:
        with redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3) as client:
            client.ping()
    except (redis.RedisError, ValueError) as error:
        sys.exit(f"bench: Redis at {where} (REDIS_URL) is unreachable: {error}")
    return where


def _machine(connection: Any) -> str:
    """Return the processor, cores, and server versions this run measured on, and the date."""
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "an unknown processor",
    )
    with connection.temporary_connection() as cursor:
        cursor.execute("SHOW server_version")
        postgres = cursor.fetchone()[0].split()[0]
    with redis.Redis.from_url(os.environ["REDIS_URL"]) as client:
        redis_version = client.info("server")["redis_version"]
    return (
        f"{model}, {os.cpu_count()} cores, PostgreSQL {postgres}, Redis {redis_version}, "
        f"Python {platform.python_version()}, {datetime.now(UTC).date().isoformat()}"
    )


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    """Turn SIGTERM into SystemExit, so the throwaway database is still dropped."""
    sys.exit(128 + signum)


if __name__ == "__main__":
    sys.exit(main())
