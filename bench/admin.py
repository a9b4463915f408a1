"""Admin: the sessions list page over 100,000 sessions, rendered whole through Django's stack.

Ours is a staff user's GET of `/admin/sessions_app/agentsession/` through the test client (every
middleware, the changelist, its filters and the template), unfiltered and with a status filter.
The raw side, measured in the same run in rotating order, SELECTs the same page of the same
columns with the owner's name by hand on psycopg. The target holds the page itself: under one
second.
"""

import statistics
import time
from collections.abc import Iterator
from datetime import timedelta
from functools import partial

import psycopg
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.utils import timezone

from bench.harness import Options, Row, Table, interleave
from bench.raw import connect
from sessions_app.models import AgentSession

LEGEND = (
    "Admin: a staff user's sessions list page over many sessions, rendered by Django (test "
    "client, full middleware and template), against a hand-written SELECT of the same page on "
    "psycopg; the target holds the page under one second."
)
SESSIONS, QUICK_SESSIONS = 100_000, 5_000
RUNS, QUICK_RUNS = 30, 5
PAGE_TARGET_MS = 1000.0
LIST = "/admin/sessions_app/agentsession/"
RAW_PAGE = """
SELECT s.id, s.agent_type, u.username, s.status, s.step_count, s.message_count,
       s.updated_at, s.expires_at
FROM sessions_app_agentsession s LEFT JOIN auth_user u ON u.id = s.owner_id
{where} ORDER BY s.updated_at DESC, s.id DESC LIMIT 50
"""


def run(options: Options) -> Iterator[Table]:
    """Yield the table of the list page's render time, unfiltered and filtered by status."""
    sessions = QUICK_SESSIONS if options.quick else SESSIONS
    staff = _build(sessions)
    client = Client(HTTP_HOST="127.0.0.1")  # An allowed host, unlike the test client's own.
    client.force_login(staff)
    runs = QUICK_RUNS if options.quick else RUNS
    rounds = Options(iterations=runs, warmup=2)
    rows = []
    with connect(connection.settings_dict, like_django=False) as raw:
        for metric, query, where in (
            ("list ms", "", ""),
            ("status ms", "?status__exact=failed", "WHERE s.status = 'failed'"),
        ):
            ours, theirs = interleave(
                [partial(_page, client, LIST + query), partial(_raw, raw, where)], rounds
            )
            rows.append(
                Row(
                    metric=metric,
                    orm=statistics.median(ours) / 1e6,
                    strict_raw=statistics.median(theirs) / 1e6,
                )
            )
    yield Table(
        title=f"Admin sessions list over {sessions:,} sessions (p50 ms, {runs} runs)",
        rows=[*rows, Row(metric="list p50", orm=rows[0].orm, target=PAGE_TARGET_MS, precision=1)],
        notes=["the ratio is the whole page against its SELECT alone; the target is the page's"],
        columns=("page", "-", "raw SELECT"),
    )


def _page(client: Client, url: str) -> int:
    """Render one list page; return the nanoseconds it took."""
    started = time.perf_counter_ns()
    response = client.get(url)
    elapsed = time.perf_counter_ns() - started
    if response.status_code != 200 or b"result_list" not in response.content:
        raise RuntimeError(f"{url} answered {response.status_code}")
    return elapsed


def _raw(raw: psycopg.Connection, where: str) -> int:
    """Select one page by hand; return the nanoseconds it took."""
    started = time.perf_counter_ns()
    with raw.cursor() as cursor:
        cursor.execute(RAW_PAGE.format(where=where))
        cursor.fetchall()
    return time.perf_counter_ns() - started


def _build(sessions: int):
    """Create the sessions, a tenth failed, owned by ten users; return a staff user."""
    users = get_user_model()
    owners = [users.objects.create_user(f"owner-{n}") for n in range(10)]
    now = timezone.now()
    for first in range(0, sessions, 5_000):
        AgentSession.objects.bulk_create(
            AgentSession(
                id=f"admin-{n:07}",
                agent_type=("researcher", "counter")[n % 2],
                stream_id=f"admin-stream-{n:07}",
                owner=owners[n % 10],
                status="failed" if n % 10 == 0 else "completed",
                step_count=n % 7,
                message_count=n % 40,
                tags=["bench"],
                metadata={"n": str(n)},
                custom_state={"board": "x" * 2000},
                updated_at=now - timedelta(seconds=n),
                expires_at=now + timedelta(days=1),
            )
            for n in range(first, min(first + 5_000, sessions))
        )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE sessions_app_agentsession")
    return users.objects.create_superuser("bench-admin", password="unused")
