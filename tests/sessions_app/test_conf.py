"""Backends are chosen by dotted path in the HELIX setting and rebuilt when it changes."""

from django.test import override_settings

from sessions_app.stores import get_session_store
from sessions_app.stores.memory import InMemorySessionStateStore
from sessions_app.stores.orm import ORMSessionStateStore


def test_default_store_is_the_orm_backend_built_once():
    assert isinstance(get_session_store(), ORMSessionStateStore)
    assert get_session_store() is get_session_store()


def test_store_follows_the_helix_setting_and_its_options():
    memory = {
        "BACKEND": "sessions_app.stores.memory.InMemorySessionStateStore",
        "OPTIONS": {"max_staged_changes_bytes": 1234},
    }
    with override_settings(HELIX={"SESSION_STORE": memory}):
        store = get_session_store()
        assert isinstance(store, InMemorySessionStateStore)
        assert store.max_staged_changes_bytes == 1234

    assert isinstance(get_session_store(), ORMSessionStateStore)
