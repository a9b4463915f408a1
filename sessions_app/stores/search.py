"""Full-text search over message content, the same on PostgreSQL and SQLite.

Both stem English words with the Snowball English stemmer ("deploying" finds "deployment") and
leave out PostgreSQL's English stop words: PostgreSQL with its `english` configuration over the
`search_vector` column, SQLite with an FTS5 table of each message's `search_text` (stems, and a
placeholder where a stop word stood), which triggers keep in step by calling `search_text`, a
function every SQLite connection registers (`register_sqlite_functions`). FTS5's own porter
tokenizer would not do: it stems "deploying" to "deploi" and "deployment" to "deploy".

Two query forms, as the reference's session and manager searches have them:
- `phrase`: the query's words in order, as one phrase (a session's search);
- `all_words`: every word of the query, anywhere (search across a user's sessions).

Best matches come first (each engine's own ranking), then newer messages. SQLite's query is
built from the query's stems only, so no input is FTS5 syntax; PostgreSQL parses the text itself.

Context entries (`sessions_app.memory.providers`) are indexed and matched the same way, with
`search_text` and `fts5_match`.
"""

import re
import sqlite3
from typing import Literal

import snowballstemmer
from django.db import connection

from sessions_app.stores.types import MessageHit, MessageRole

SearchMode = Literal["phrase", "all_words"]
_WORD = re.compile(r"\w+")
# PostgreSQL's English stop words (tsearch_data/english.stop).
STOP_WORDS = frozenset(
    """
    i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
    she her hers herself it its itself they them their theirs themselves what which who whom
    this that these those am is are was were be been being have has had having do does did doing
    a an the and but if or because as until while of at by for with about against between into
    through during before after above below to from up down in out on off over under again
    further then once here there when where why how all any both each few more most other some
    such no nor not only own same so than too very s t can will just don should now
    """.split()  # noqa: SIM905 (127 words read better as text)
)
# Only this many leading characters of a text are indexed: PostgreSQL's `tsvector` of a longer
# one could pass its 1 MiB limit, and the row could not be stored (migration 0009).
SEARCHED_LENGTH = 100_000
# Stands where a stop word stood, so a phrase keeps its word positions; no word stems to it.
STOP = "\u01c2"
_STEMMER = snowballstemmer.stemmer("english")
_COLUMNS = "m.id, m.session_id, m.role, m.content, m.created_at"
_POSTGRES_QUERY = {"phrase": "phraseto_tsquery", "all_words": "plainto_tsquery"}
_BEST_FIRST = {"postgresql": "ts_rank(m.search_vector, q.query) DESC", "sqlite": "f.rank"}


def search_messages(
    query: str,
    mode: SearchMode,
    limit: int,
    *,
    session_id: str | None = None,
    owner_id: int | None = None,
) -> list[MessageHit]:
    """Return up to `limit` messages matching `query`, of one session or of one owner's."""
    if session_id is not None:
        joined, scope, scope_params = "", "m.session_id = %s", [session_id]
    else:  # Only an owner's search needs the sessions: a session's reads its messages alone.
        joined = " JOIN sessions_app_agentsession s ON s.id = m.session_id"
        scope, scope_params = "s.owner_id = %s", [owner_id]
    if connection.vendor == "postgresql":
        sql = (
            f"SELECT {_COLUMNS} FROM sessions_app_message m{joined}, "
            f"{_POSTGRES_QUERY[mode]}('english', %s) q(query) "
            "WHERE m.search_vector @@ q.query"
        )
        params = [query]
    else:
        match = fts5_match(query, mode)
        if match is None:
            return []
        sql = (
            f"SELECT {_COLUMNS} FROM sessions_app_message_fts f "
            f"JOIN sessions_app_message m ON m.rowid = f.rowid{joined} "
            "WHERE sessions_app_message_fts MATCH %s"
        )
        params = [match]
    sql, params = f"{sql} AND {scope}", [*params, *scope_params]
    best = _BEST_FIRST[connection.vendor]
    with connection.cursor() as cursor:
        cursor.execute(
            f"{sql} ORDER BY {best}, m.created_at DESC, m.sequence DESC LIMIT %s", [*params, limit]
        )
        return [
            MessageHit(
                message_id=row[0],
                session_id=row[1],
                role=MessageRole(row[2]),
                content=row[3],
                created_at=row[4],
            )
            for row in cursor.fetchall()
        ]


def search_text(text: str) -> str:
    """Return what SQLite indexes of `text`: its words' stems, `STOP` for each stop word."""
    words = _WORD.findall(text[:SEARCHED_LENGTH].lower())
    stems = iter(_STEMMER.stemWords([word for word in words if word not in STOP_WORDS]))
    return " ".join(STOP if word in STOP_WORDS else next(stems) for word in words)


def register_sqlite_functions(raw_connection: sqlite3.Connection) -> None:
    """Give an SQLite connection the `search_text` function the search triggers call."""
    raw_connection.create_function("search_text", 1, search_text, deterministic=True)


def fts5_match(query: str, mode: SearchMode) -> str | None:
    """Return the FTS5 query for `query`'s stems, or None when it has none to look for."""
    stems = search_text(query).split()
    if mode == "all_words":
        stems = [stem for stem in stems if stem != STOP]
    if not any(stem != STOP for stem in stems):
        return None
    if mode == "phrase":
        return '"' + " ".join(stems) + '"'
    return " AND ".join(f'"{stem}"' for stem in stems)
