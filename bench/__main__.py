"""Run every benchmark on a throwaway PostgreSQL database: `python -m bench [--quick]`."""

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType
from typing import Any

import django
import psycopg
from django.db import connection
from django.test.utils import override_settings

from bench import database_url
from bench.harness import Options

DEFAULT_ITERATIONS = 500
QUICK_ITERATIONS = 10


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmarks; return 1 if a full run misses a target."""
    args = _parse_args(argv)
    iterations = args.iterations or (QUICK_ITERATIONS if args.quick else DEFAULT_ITERATIONS)
    options = Options(
        iterations=iterations, warmup=max(2, iterations // 10), show_sql=args.show_sql
    )
    url = database_url()
    if os.environ.get("DATABASE_URL", url) != url:
        print(f"DATABASE_URL does not name PostgreSQL; benchmarking on {url} instead.")
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "helix_project.settings")
    django.setup()
    from bench import stores  # Its models need the app registry that django.setup() fills.

    database = connection.settings_dict
    if connection.vendor != "postgresql":
        sys.exit(f"bench: needs PostgreSQL; DATABASE_URL gives {connection.vendor}.")
    _check_reachable(database)
    print(
        f"PostgreSQL at {database['HOST']}:{database['PORT']}; "
        "each ratio = ORM slowdown vs the raw side left of it."
    )
    print(stores.LEGEND + "\n")

    signal.signal(signal.SIGTERM, _exit_on_signal)
    database_name = database["NAME"]
    database["TEST"]["NAME"] = f"test_{database_name}_bench_{os.getpid()}"
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    missed: list[str] = []
    try:
        # The debug cursor records every query; time the one production uses.
        with override_settings(DEBUG=False):
            for table in stores.run(options):
                print(table.render() + "\n", flush=True)
                missed += [f"{table.title}: {row.metric}" for row in table.rows if not row.passed]
    finally:
        connection.creation.destroy_test_db(database_name, verbosity=0)
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
        description="Compare the ORM session store with raw psycopg running the same SQL.",
    )
    parser.add_argument(
        "--iterations",
        type=_at_least_two,
        help=f"timed runs per side and benchmark (default {DEFAULT_ITERATIONS}, "
        f"{QUICK_ITERATIONS} with --quick); a tenth as many warm up first",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a few-second smoke run; targets are not enforced"
    )
    parser.add_argument(
        "--show-sql", action="store_true", help="print the SQL each operation runs on both sides"
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


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    """Turn SIGTERM into SystemExit, so the throwaway database is still dropped."""
    sys.exit(128 + signum)


if __name__ == "__main__":
    sys.exit(main())
