"""The MCP server the MCP tests start, written with the SDK (no Helix code, no Django).

    python fixture_server.py http PORT   # streamable HTTP at /mcp (and /secure/mcp)
    python fixture_server.py stdio       # the same server over stdio

Tools: `echo` (fast), `slow` (sleeps), `fail` (an error result), `image` (a PNG), `effect`
(records the call, then sleeps: a side effect the tests count), `transfer` (for approvals) and
`grow` (adds a tool now, and announces it unless told not to). Every call is appended to the
file `FIXTURE_CALLS_LOG` names, as a JSON line. Under `/secure/mcp` every request must carry
`X-Fixture-Key: <FIXTURE_KEY>`; it answers 401 otherwise.
"""

import base64
import json
import os
import sys
from pathlib import Path

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context, Image
from mcp.server.mcpserver.exceptions import ToolError

# A 1x1 transparent PNG.
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
SECURE_PREFIX = "/secure"

server = MCPServer("fixture", instructions="A server for Helix's MCP tests.")


def record(tool: str, **arguments: object) -> None:
    log = os.environ.get("FIXTURE_CALLS_LOG")
    if log:
        with Path(log).open("a") as calls:
            calls.write(json.dumps({"tool": tool, "arguments": arguments}) + "\n")


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    record("echo", text=text)
    return f"echo: {text}"


@server.tool()
async def slow(seconds: float) -> str:
    """Answer after `seconds`."""
    record("slow", seconds=seconds)
    await anyio.sleep(seconds)
    return f"slept {seconds}"


@server.tool()
def fail(why: str) -> str:
    """Always fail, saying why."""
    record("fail", why=why)
    raise ToolError(f"failed on purpose: {why}")


@server.tool()
def image() -> Image:
    """Return a tiny PNG."""
    record("image")
    return Image(data=PIXEL, format="png")


@server.tool()
async def effect(label: str, seconds: float = 0.0) -> str:
    """Have a side effect (recorded), then take `seconds`."""
    record("effect", label=label, seconds=seconds)
    await anyio.sleep(seconds)
    return f"effect {label}"


@server.tool()
def transfer(amount: int) -> dict:
    """Move money (a person approves each call)."""
    record("transfer", amount=amount)
    return {"sent": amount}


@server.tool()
async def grow(name: str, ctx: Context, announce: bool = True) -> str:
    """Add a tool `name` that doubles a number; announce the change unless told not to."""
    record("grow", name=name, announce=announce)

    def doubled(x: int) -> int:
        return 2 * x

    server.add_tool(doubled, name=name, description=f"Double x ({name}).")
    if announce:
        await ctx.notify_tools_changed()
        # Answer once the announcement had time to travel: clients list again on it.
        await anyio.sleep(0.3)
    return f"grew {name}"


@server.prompt()
def greet(name: str) -> str:
    """Greet someone."""
    return f"Hello, {name}!"


@server.resource("fixture://readme")
def readme() -> str:
    """What this server is."""
    return "The fixture server."


def secured(app):
    """Require `X-Fixture-Key` on the `/secure` paths; strip the prefix."""
    key = os.environ.get("FIXTURE_KEY", "").encode()

    async def guarded(scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith(SECURE_PREFIX + "/"):
            if not key or dict(scope["headers"]).get(b"x-fixture-key") != key:
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
            path = scope["path"][len(SECURE_PREFIX) :]
            scope = {**scope, "path": path, "raw_path": path.encode()}
        await app(scope, receive, send)

    return guarded


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        import uvicorn

        uvicorn.run(
            secured(server.streamable_http_app()),
            host="127.0.0.1",
            port=int(sys.argv[2]),
            log_level="warning",
        )
