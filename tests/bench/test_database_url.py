"""The database URL the benchmark gives the processes it starts names the same database."""

import environ

from bench import settings_database_url


def test_the_url_parses_back_to_the_settings_credentials_quoted():
    database = {
        "USER": "bench user",
        "PASSWORD": "p@ss:w/rd%",
        "HOST": "db.internal",
        "PORT": "6543",
        "NAME": "helix_bench",
    }

    parsed = environ.Env.db_url_config(settings_database_url(database))

    assert {key: str(parsed[key]) for key in database} == database


def test_a_url_without_host_or_port_leaves_them_to_the_client():
    database = {"USER": "postgres", "PASSWORD": "", "HOST": "", "PORT": "", "NAME": "helix"}

    assert settings_database_url(database) == "postgres://postgres@/helix"
