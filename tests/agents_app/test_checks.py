"""`manage.py check` says what Helix needs from a project's settings and does not find."""

from django.conf import settings
from django.core.checks.registry import registry
from django.test import override_settings

from agents_app.checks import check_site


def test_the_check_runs_with_djangos_checks():
    assert check_site in registry.get_checks()


def test_a_project_with_what_helix_needs_passes():
    assert check_site(None) == []


def test_a_project_without_a_default_channel_layer_is_told_so():
    with override_settings(CHANNEL_LAYERS={}):
        assert [error.id for error in check_site(None)] == ["helix.E002"]


def test_a_project_without_drfs_tokens_is_told_so():
    with override_settings(
        INSTALLED_APPS=[app for app in settings.INSTALLED_APPS if app != "rest_framework.authtoken"]
    ):
        assert [error.id for error in check_site(None)] == ["helix.E001"]
