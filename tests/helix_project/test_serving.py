"""Daphne's `runserver` is the project's, yet a process that serves nothing never loads
Daphne's server (Twisted, autobahn)."""

import json

from tests.helix_project.environment import ENVIRONMENT_ONLY, run_shell

PROBE = """
import json, sys
from django.core.management import get_commands, load_command_class

def loaded():
    return sorted(name for name in ("daphne.server", "twisted", "autobahn") if name in sys.modules)

at_setup = loaded()
runserver = load_command_class(get_commands()["runserver"], "runserver")
print(json.dumps([at_setup, type(runserver).__module__, loaded()]))
"""


@ENVIRONMENT_ONLY
def test_runserver_is_daphne_s_and_loads_its_server_only_when_it_runs(tmp_path):
    probed = run_shell(PROBE, tmp_path=tmp_path)

    assert probed.returncode == 0, probed.stderr
    at_setup, runserver, when_loaded = json.loads(probed.stdout.splitlines()[-1])
    assert at_setup == []
    assert runserver == "daphne.management.commands.runserver"
    assert when_loaded == ["autobahn", "daphne.server", "twisted"]
