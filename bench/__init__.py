"""Compare Helix's ORM code paths with raw psycopg running the same SQL (`python -m bench`)."""

import os
from urllib.parse import urlsplit

import environ

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/helix"


def database_url() -> str:
    """Return `DATABASE_URL` if it names PostgreSQL, else the default local PostgreSQL URL."""
    url = os.environ.get("DATABASE_URL", "")
    return url if urlsplit(url).scheme in environ.Env.POSTGRES_FAMILY else DEFAULT_DATABASE_URL
