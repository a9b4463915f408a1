"""The memory benchmark's data: one long branching conversation and a corpus of sessions to search.

Text is English-like and fixed by `SEED`: PostgreSQL's stop words, forms of common chat words
and generated rarer words, drawn with Zipf frequencies, with planted phrases for the queries to
find: each rare phrase stands in a few messages, each common one in about one in 250.
Messages go in by COPY with the search index dropped, which is rebuilt once after the load.

Full runs keep the data in `CACHE_DATABASE` and reuse it while its marker (a comment on the
database naming the data set) matches; otherwise they drop and rebuild the database.
"""

import json
import random
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from psycopg import sql

from bench.raw import connect
from sessions_app.models import AgentSession
from sessions_app.stores.search import STOP_WORDS

CACHE_DATABASE = "helix_benchmem"
SEED = 7
# Bump when the generated data changes, so cached data sets are rebuilt.
DATASET_VERSION = 1
HISTORY_AGENT = "bench-memory-history"
SEARCH_AGENT = "bench-memory-search"
SESSION_MESSAGES = 1_000
OWNERS = 5
# Every this many messages along the active branch, a side branch forks off it.
BRANCH_EVERY = 1_000
BRANCH_LENGTH = 3
RARE_RATE = 1 / 2_000
COMMON_RATE = 1 / 40
TAIL_WORDS = 2_500

RARE_PHRASES = (
    "saffron risotto",
    "glacier tectonics",
    "harpsichord tuning",
    "origami crane",
    "lighthouse keeper",
    "volcanic basalt",
    "tapestry loom",
    "walrus colony",
)
COMMON_PHRASES = (
    "connection pool",
    "error message",
    "unit test",
    "pull request",
    "release notes",
    "rate limit",
)
_ROOTS = """
    account action agent answer api app argument array backup batch branch browser buffer bug
    build cache call change channel chart check client cluster code column command comment commit
    config connection container context copy count customer dashboard data database date debug
    default delete deploy design detail device document domain draft email endpoint engine entry
    environment error event example export feature field file filter fix folder form format
    function graph group handler header history host image import index input install instance
    issue item job key label language layer library limit line link list load lock log login
    loop memory message method metric migration model module monitor name network node note
    number object option order output owner package page parameter parser password path pattern
    payment permission pipeline plan plugin point policy pool port post price print problem
    process product profile project prompt property provider pull query queue rate record
    reference region release report repository request resource response result retry review
    role route row rule run sample scale schema scope screen script search secret section
    server service session setting shell signal size snapshot source space stage state status
    step storage store stream string style summary support system table tag task team template
    term test text thread ticket time timeout token tool trace track transaction type unit
    update upload user value version view volume warning window worker workflow write
"""
_SUFFIXES = ("", "s", "ed", "ing")
# Syllables of the generated rarer words.
_ONSETS = ("b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z",
           "br", "cr", "dr", "fl", "gr", "pl", "pr", "st", "tr", "th", "sh", "ch")  # fmt: skip
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "oo", "ou")
_CODAS = ("", "", "n", "r", "l", "st", "nd", "x", "m")
_COPY = (
    "COPY sessions_app_message (id, session_id, sequence, parent_id, role, content, tool_calls, "
    "tool_call_id, name, parts, metadata, created_at) FROM STDIN"
)
_START = datetime(2025, 1, 1, tzinfo=UTC)
_ROLES = ("user", "assistant")


@dataclass(frozen=True, kw_only=True)
class Corpus:
    """Where the data sets are and what they hold."""

    history_session: str
    history_messages: int
    active_branch: int
    search_sessions: list[str]
    owners: list[int]
    search_messages: int
    # How the data got there: "built in ..." or "reused from ...".
    origin: str


@contextmanager
def corpus(*, history_messages: int, search_messages: int, cache: bool) -> Iterator[Corpus]:
    """Yield the data sets: built in Django's current database, or in the cache database."""
    spec = {
        "version": DATASET_VERSION,
        "seed": SEED,
        "history_messages": history_messages,
        "search_messages": search_messages,
    }
    if not cache:
        yield _built(spec, "the throwaway database")
        return
    marker = f"bench.memory data set {json.dumps(spec, sort_keys=True)}"
    reused = _prepare_cache(marker)
    with _on_database(CACHE_DATABASE):
        call_command("migrate", verbosity=0, interactive=False)
        if reused:
            yield _found(spec, f"reused from the {CACHE_DATABASE} database")
            return
        built = _built(spec, f"the {CACHE_DATABASE} database, kept for later runs")
        with connect(connection.settings_dict, like_django=False) as raw:
            raw.execute(
                sql.SQL("COMMENT ON DATABASE {} IS {}").format(
                    sql.Identifier(CACHE_DATABASE), sql.Literal(marker)
                )
            )
        yield built


def history_parents(total: int) -> tuple[list[int | None], int]:
    """Return each history message's parent (an index, `None` for the root) and the branch length.

    Messages follow one chain; every `BRANCH_EVERY` chain messages a side branch of
    `BRANCH_LENGTH` forks off beside the chain's last. The chain ends with the last message.
    """
    parents: list[int | None] = []
    chain_end: int | None = None
    chain = 0
    while len(parents) < total:
        parents.append(chain_end)
        chain_end = len(parents) - 1
        chain += 1
        if chain % BRANCH_EVERY == 0 and len(parents) + BRANCH_LENGTH < total:
            fork = parents[chain_end]
            for _ in range(BRANCH_LENGTH):
                parents.append(fork)
                fork = len(parents) - 1
    return parents, chain


def _prepare_cache(marker: str) -> bool:
    """Return whether the cache database holds the data set; if not, recreate it empty."""
    with _admin() as admin:
        found = admin.execute(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
            [CACHE_DATABASE],
        ).fetchone()
        if found is not None and found[0] == marker:
            return True
        name = sql.Identifier(CACHE_DATABASE)
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(name))
    return False


def _admin() -> psycopg.Connection:
    """Connect to the server's `postgres` database, where databases are created and dropped."""
    return connect({**connection.settings_dict, "NAME": "postgres"}, like_django=False)


@contextmanager
def _on_database(name: str) -> Iterator[None]:
    """Point Django's connection at database `name` until the block exits, as tests do."""
    previous = connection.settings_dict["NAME"]
    connection.close()
    settings.DATABASES[connection.alias]["NAME"] = connection.settings_dict["NAME"] = name
    try:
        yield
    finally:
        connection.close()
        settings.DATABASES[connection.alias]["NAME"] = connection.settings_dict["NAME"] = previous


def _found(spec: dict[str, Any], origin: str) -> Corpus:
    """Return the data sets already in the database."""
    sessions = AgentSession.objects.order_by("id")
    history = sessions.get(agent_type=HISTORY_AGENT).id
    search = sessions.filter(agent_type=SEARCH_AGENT)
    return Corpus(
        history_session=history,
        history_messages=spec["history_messages"],
        active_branch=history_parents(spec["history_messages"])[1],
        search_sessions=list(search.values_list("id", flat=True)),
        owners=sorted(set(search.values_list("owner_id", flat=True))),
        search_messages=spec["search_messages"],
        origin=origin,
    )


def _built(spec: dict[str, Any], where: str) -> Corpus:
    """Build both data sets in Django's current database and return them."""
    started = time.perf_counter()
    rng = random.Random(spec["seed"])
    text = _Text(rng)
    history_total, search_total = spec["history_messages"], spec["search_messages"]
    session_count = max(OWNERS, search_total // SESSION_MESSAGES)
    owners = get_user_model().objects.bulk_create(
        get_user_model()(username=f"bench-memory-{n}", password="!") for n in range(OWNERS)
    )
    sessions = [
        AgentSession(
            id=_uuid(rng),
            agent_type=SEARCH_AGENT,
            owner_id=owners[n % OWNERS].pk,
            message_count=search_total // session_count + (n < search_total % session_count),
            created_at=_START,
            updated_at=_START,
        )
        for n in range(session_count)
    ]
    history = AgentSession(
        id=_uuid(rng),
        agent_type=HISTORY_AGENT,
        message_count=history_total,
        created_at=_START,
        updated_at=_START,
    )
    AgentSession.objects.bulk_create([history, *sessions])
    with connect(connection.settings_dict, like_django=False) as raw, raw.cursor() as cursor:
        (index,) = cursor.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'message_search'"
        ).fetchone()
        cursor.execute("DROP INDEX message_search")
        with cursor.copy(_COPY) as copy:
            for row in _rows(rng, text, history, sessions):
                copy.write_row(row)
        loaded = time.perf_counter()
        cursor.execute("SET maintenance_work_mem = '512MB'")
        cursor.execute(index)
        indexed = time.perf_counter()
        cursor.execute("VACUUM ANALYZE sessions_app_message")
        cursor.execute("ANALYZE sessions_app_agentsession")
    finished = time.perf_counter()
    return Corpus(
        history_session=history.id,
        history_messages=history_total,
        active_branch=history_parents(history_total)[1],
        search_sessions=sorted(session.id for session in sessions),
        owners=[owner.pk for owner in owners],
        search_messages=search_total,
        origin=(
            f"built in {finished - started:.1f} s in {where}: {loaded - started:.1f} s to COPY "
            f"{history_total + search_total:,} messages, {indexed - loaded:.1f} s to build the "
            f"GIN index, {finished - indexed:.1f} s to vacuum and analyze"
        ),
    )


def _rows(
    rng: random.Random, text: "_Text", history: AgentSession, sessions: list[AgentSession]
) -> Iterator[tuple[object, ...]]:
    """Yield the message rows of the history session, then of each search session."""
    created = 0
    parents, _ = history_parents(history.message_count)
    ids = [_uuid(rng) for _ in parents]
    for n, parent in enumerate(parents):
        created += 1
        role = _ROLES[n % 2]
        parent_id = None if parent is None else ids[parent]
        yield _row(ids[n], history.id, n + 1, parent_id, role, text.message(role), created)
    for session in sessions:
        parent_id = None
        for n in range(session.message_count):
            created += 1
            message_id = _uuid(rng)
            role = _ROLES[n % 2]
            yield _row(message_id, session.id, n + 1, parent_id, role, text.message(role), created)
            parent_id = message_id


def _row(
    message_id: str,
    session_id: str,
    sequence: int,
    parent_id: str | None,
    role: str,
    content: str,
    created: int,
) -> tuple[object, ...]:
    """Return one message row in `_COPY`'s column order; each message a millisecond later."""
    created_at = _START + timedelta(milliseconds=created)
    return (message_id, session_id, sequence, parent_id, role, content, "[]", "", "", "[]", "{}",
            created_at)  # fmt: skip


def _uuid(rng: random.Random) -> str:
    """Return a random UUID drawn from `rng`."""
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


class _Text:
    """Draw message texts from the vocabulary with Zipf frequencies, planting phrases."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.words = vocabulary()
        self.cum_weights: list[float] = []
        total = 0.0
        for rank in range(1, len(self.words) + 1):
            total += 1 / rank
            self.cum_weights.append(total)

    def message(self, role: str) -> str:
        """Return a user's short message or an assistant's longer one."""
        rng = self.rng
        count = rng.randint(4, 40) if role == "user" else rng.randint(15, 90)
        words = rng.choices(self.words, cum_weights=self.cum_weights, k=count)
        chance = rng.random()
        if chance < RARE_RATE + COMMON_RATE:
            phrases = RARE_PHRASES if chance < RARE_RATE else COMMON_PHRASES
            words.insert(rng.randrange(count), rng.choice(phrases))
        return " ".join(words)


def vocabulary() -> list[str]:
    """Return the words by falling frequency: stop words, forms of common words, then rarer ones."""
    rng = random.Random(SEED)
    stop_words = sorted(STOP_WORDS)
    forms = [_form(root, suffix) for root in _ROOTS.split() for suffix in _SUFFIXES]
    rng.shuffle(stop_words)
    rng.shuffle(forms)
    taken = {*stop_words, *forms, *" ".join(RARE_PHRASES).split()}
    tail: list[str] = []
    while len(tail) < TAIL_WORDS:
        syllables = rng.choice((1, 2, 2, 3))
        word = "".join(
            rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables)
        )
        if word not in taken:
            taken.add(word)
            tail.append(word)
    return [*stop_words, *forms, *tail]


def _form(root: str, suffix: str) -> str:
    """Return `root` with `suffix`, dropping a silent final e before a vowel ("stored")."""
    if root.endswith("e") and suffix[:1] in ("e", "i"):
        return root[:-1] + suffix
    return root + suffix
