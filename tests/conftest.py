"""Shared test configuration: service checks for the whole run (see `tests.services`)."""

import pytest
from asgiref.sync import SyncToAsync
from django.conf import settings
from django.core.cache import cache
from django.db import connections

from tests.services import PROBLEMS, REQUIRED_SERVICES, database_vendor

_DB_FIXTURES = {
    "db",
    "transactional_db",
    "django_db_reset_sequences",
    "django_db_serialized_rollback",
}


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [
        f"helix: database {database_vendor()} ({settings.DATABASES['default']['NAME']}); "
        f"required services: {', '.join(sorted(REQUIRED_SERVICES)) or 'none'}"
    ]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a run missing a required service; skip what needs an absent one, saying why."""
    problems = {service: PROBLEMS[service]() for service in PROBLEMS}
    for service in REQUIRED_SERVICES:
        if problems.get(service):
            raise pytest.UsageError(f"{service} is required in this run but {problems[service]}")
    database_down = database_vendor() == "postgresql" and problems["postgres"]
    for item in items:
        uses_db = _DB_FIXTURES & set(item.fixturenames) or item.get_closest_marker("django_db")
        if (database_down and uses_db) or (
            item.get_closest_marker("postgres") and problems["postgres"]
        ):
            item.add_marker(pytest.mark.skip(reason=f"postgres: {problems['postgres']}"))


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Leave an empty cache to the next test, if it is the process-local one (not a Redis)."""
    yield
    if settings.CACHES["default"]["BACKEND"].endswith("LocMemCache"):
        cache.clear()


@pytest.fixture(autouse=True)
def _close_connections_of_async_code():
    """Close what async tests left open in asgiref's shared thread, so test databases can drop."""
    yield
    SyncToAsync.single_thread_executor.submit(connections.close_all).result()


@pytest.fixture
def owner(django_user_model):
    """A user who owns the sessions a test creates."""
    return django_user_model.objects.create_user("owner", password="pw")


@pytest.fixture
def stranger(django_user_model):
    """A user who owns nothing, to check isolation."""
    return django_user_model.objects.create_user("stranger", password="pw")
