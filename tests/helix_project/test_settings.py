"""Settings come from the environment only; production-like variables pass `check --deploy`."""

import secrets

import pytest
from django.conf import settings
from django.db import connection

from tests.helix_project.environment import ENVIRONMENT_ONLY, run_manage, run_shell
from tests.live import database_url

PRODUCTION_TLS = {
    "SECURE_SSL_REDIRECT": "true",
    "SECURE_HSTS_SECONDS": "31536000",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "true",
    "SECURE_HSTS_PRELOAD": "true",
}


def production_env(**overrides: str) -> dict[str, str]:
    return {
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "helix.example.com",
        **overrides,
    }


@ENVIRONMENT_ONLY
def test_production_like_environment_passes_check_deploy(tmp_path):
    result = run_manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        tmp_path=tmp_path,
        **production_env(**PRODUCTION_TLS),
    )

    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


@ENVIRONMENT_ONLY
def test_without_tls_opt_ins_check_deploy_reports_only_hsts_and_redirect(tmp_path):
    result = run_manage("check", "--deploy", tmp_path=tmp_path, **production_env())

    reported = {
        line.split(")")[0].split("(")[-1]
        for line in result.stderr.splitlines()
        if "(security." in line
    }
    assert reported == {"security.W004", "security.W008"}


@ENVIRONMENT_ONLY
def test_debug_off_without_secret_key_refuses_to_start(tmp_path):
    result = run_manage("check", tmp_path=tmp_path, DEBUG="false")

    assert result.returncode != 0
    assert "Set SECRET_KEY" in result.stderr


@ENVIRONMENT_ONLY
def test_service_urls_select_redis_backends(tmp_path):
    script = (
        "from django.conf import settings as s; "
        "print(s.CHANNEL_LAYERS['default']['BACKEND'], s.CELERY_BROKER_URL, "
        "s.DATABASES['default']['ENGINE'])"
    )
    embedded = run_shell(script, tmp_path=tmp_path)
    served = run_shell(
        script,
        tmp_path=tmp_path,
        REDIS_URL="redis://127.0.0.1:6379/3",
        DATABASE_URL="postgres://helix@db.example.com:5432/helix",
    )

    assert embedded.stdout.split() == [
        "channels.layers.InMemoryChannelLayer",
        "filesystem://",
        "django.db.backends.sqlite3",
    ]
    assert served.stdout.split() == [
        "channels_redis.pubsub.RedisPubSubChannelLayer",
        "redis://127.0.0.1:6379/3",
        "django.db.backends.postgresql",
    ]


@pytest.mark.django_db
def test_sqlite_runs_in_wal_mode_with_immediate_transactions():
    if connection.vendor != "sqlite":
        pytest.skip("sqlite: this run's database is not SQLite")
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone()[0] == "wal"
    assert settings.DATABASES["default"]["OPTIONS"]["transaction_mode"] == "IMMEDIATE"


@pytest.mark.postgres
@pytest.mark.django_db
def test_a_database_pool_serves_connections_when_asked_for(tmp_path):
    script = (
        "from django.db import connection; connection.ensure_connection(); "
        "print(type(connection.pool).__name__, connection.pool.max_size); connection.close()"
    )
    pooled = run_shell(
        script,
        tmp_path=tmp_path,
        DATABASE_URL=database_url(),
        DATABASE_POOL_MAX_SIZE="3",
    )

    assert pooled.stdout.split() == ["ConnectionPool", "3"], pooled.stderr
