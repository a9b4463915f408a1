"""Agents are discovered as Django discovers admin modules: the `agents` module of every
installed app registers its agents when Django starts, beside the modules HELIX["AGENTS"] names."""

import importlib.util
import sys

import pytest
from django.conf import settings
from django.test import override_settings

from agents_app.definitions.registry import get_registry

APP = "tests.agents_app.installed_app"
AGENT = "from-an-installed-app"


@pytest.fixture
def installed_app():
    """Install `APP` beside this project's apps, as a project that adds Helix would; its
    `agents` module is imported afresh, as on Django's start."""
    sys.modules.pop(f"{APP}.agents", None)
    try:
        with override_settings(INSTALLED_APPS=[*settings.INSTALLED_APPS, APP]):
            yield
    finally:
        get_registry().unregister(AGENT)


def test_an_installed_apps_agents_module_registers_its_agents_when_django_starts(installed_app):
    assert get_registry().has(AGENT)


def test_an_installed_apps_agents_stay_whatever_helix_agents_names(installed_app):
    with override_settings(HELIX={**settings.HELIX, "AGENTS": []}):
        assert get_registry().has(AGENT)
        assert not get_registry().has("researcher")  # agents_app.demo's, named no more.


def test_helix_itself_has_no_agents_module_to_discover():
    assert importlib.util.find_spec("agents_app.agents") is None
    assert not get_registry().has(AGENT)
