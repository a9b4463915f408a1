"""Compare Helix's code paths with raw psycopg and raw Redis doing the same (`python -m bench`)."""

import os
from typing import Any
from urllib.parse import quote, urlsplit

import environ

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/helix"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def database_url() -> str:
    """Return `DATABASE_URL` if it names PostgreSQL, else the default local PostgreSQL URL."""
    url = os.environ.get("DATABASE_URL", "")
    return url if urlsplit(url).scheme in environ.Env.POSTGRES_FAMILY else DEFAULT_DATABASE_URL


def redis_url() -> str:
    """Return `REDIS_URL` if set, else the default local Redis URL."""
    return os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL


def settings_database_url(database: dict[str, Any]) -> str:
    """Return the URL of a Django database's settings, for the processes the benchmark starts;
    its credentials quoted, its host and port left out where the settings leave them out."""
    credentials = quote(database["USER"] or "", safe="")
    if database["PASSWORD"]:
        credentials += ":" + quote(database["PASSWORD"], safe="")
    port = f":{database['PORT']}" if database["PORT"] else ""
    return f"postgres://{credentials}@{database['HOST'] or ''}{port}/{database['NAME']}"
