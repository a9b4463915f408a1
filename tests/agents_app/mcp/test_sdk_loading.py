"""A process loads the MCP SDK only once it uses a server: Daphne's application and a worker's
tasks import without it, and the first use of the connection pool loads it."""

import json
import os
import subprocess
import sys

# What a Daphne process (the ASGI application) and a worker (its tasks) import at start, then
# the pool's first use; the MCP SDK's modules loaded after each.
PROBE = """
import json, sys
import django
django.setup()

def loaded():
    return sorted(name for name in sys.modules if name.split(".")[0] in ("mcp", "mcp_types"))

import helix_project.asgi, agents_app.tasks
from helix_project.celery import app
app.loader.import_default_modules()
at_start = loaded()
from agents_app.mcp.pool import connection_pool
connection_pool()
print(json.dumps([at_start, loaded()]))
"""


def test_daphne_and_worker_processes_load_the_mcp_sdk_only_with_a_server_s_first_use():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "helix_project.settings"}
    probed = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )

    at_start, after_use = json.loads(probed.stdout.splitlines()[-1])
    assert at_start == []
    assert {"mcp", "mcp_types"} <= set(after_use)
