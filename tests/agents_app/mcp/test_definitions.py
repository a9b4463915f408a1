"""MCP servers in agent definitions, MCP tools as agent tools, and their results as JSON."""

import mcp_types as types
import pytest

from agents_app.definitions.agent import Agent, InvalidDefinition, SchemaInput, Tool
from agents_app.definitions.mcp_servers import InvalidServer, McpServer
from agents_app.mcp.tools import McpToolFailed, as_tool, tool_name, tool_result

URL = "https://mcp.example.com/mcp"


def test_a_server_hides_its_header_values_and_shows_their_names():
    server = McpServer(name="github", url=URL, headers={"Authorization": "Bearer s3cret"})

    assert "s3cret" not in repr(server)
    assert server.header_names == ["Authorization"]
    assert "s3cret" not in str(server.describe())
    assert server.describe()["headerNames"] == ["Authorization"]


def test_servers_share_a_connection_only_when_they_connect_alike():
    one = McpServer(name="a", url=URL, headers={"K": "1"}, denied_tools=["x"])
    same = McpServer(name="b", url=URL, headers={"K": "1"}, timeout_seconds=5)
    other = McpServer(name="a", url=URL, headers={"K": "2"})

    assert one.connection_key == same.connection_key != other.connection_key
    assert "1" not in one.connection_key.replace(one.connection_key, "")


@pytest.mark.parametrize(
    "options",
    [
        {"name": "two__underscores", "url": URL},
        {"name": "", "url": URL},
        {"name": "x" * 31, "url": URL},
        {"name": "neither"},
        {"name": "both", "url": URL, "command": "server"},
        {"name": "ftp", "url": "ftp://mcp.example.com/"},
        {"name": "creds", "url": "https://me:pw@mcp.example.com/mcp"},
        {"name": "argsurl", "url": URL, "args": ["--x"]},
        {"name": "headcmd", "command": "server", "headers": {"K": "v"}},
        {"name": "filters", "url": URL, "allowed_tools": ["a"], "denied_tools": ["b"]},
        {"name": "stringy", "url": URL, "allowed_tools": "abc"},
        {"name": "timeout", "url": URL, "timeout_seconds": 0},
        {"name": "header", "url": URL, "headers": {"Bad Name": "v"}},
        {"name": "newline", "url": URL, "headers": {"K": "v\nX: y"}},
    ],
)
def test_invalid_servers_are_refused_when_defined(options):
    with pytest.raises(InvalidServer):
        McpServer(**options)


def test_approval_is_per_server_or_per_tool_and_filters_pick_the_tools():
    every = McpServer(name="a", url=URL, needs_approval=True)
    some = McpServer(name="b", url=URL, needs_approval=["pay"], denied_tools=["drop"])
    only = McpServer(name="c", command="server", allowed_tools=["read"])

    assert every.approval_needed("read")
    assert every.approval_needed("pay")
    assert some.approval_needed("pay")
    assert not some.approval_needed("read")
    assert (some.offers("read"), some.offers("drop")) == (True, False)
    assert (only.offers("read"), only.offers("write")) == (True, False)
    assert only.address == "stdio:server"


def test_an_agent_names_its_mcp_servers_once_each():
    server = McpServer(name="a", url=URL)

    assert Agent(name="ok", mcp_servers=[server]).mcp_servers == (server,)
    with pytest.raises(InvalidDefinition, match="several MCP servers named a"):
        Agent(name="twice", mcp_servers=[server, McpServer(name="a", command="x")])
    with pytest.raises(InvalidDefinition):
        Agent(name="single", mcp_servers=server)


def test_a_tool_with_a_json_schema_sends_it_as_given_and_takes_any_object():
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    tool = Tool(name="search", description="Search.", input_schema=schema, execute=print)

    assert tool.json_schema() == schema
    assert tool.parse_input({"q": "x", "extra": 1}).model_dump() == {"q": "x", "extra": 1}
    assert isinstance(tool.parse_input({}), SchemaInput)
    with pytest.raises(InvalidDefinition):
        Tool(
            name="both", description="", input_schema=schema, input_model=SchemaInput, execute=print
        )
    with pytest.raises(InvalidDefinition):
        Tool(name="array", description="", input_schema={"type": "array"}, execute=print)
    with pytest.raises(InvalidDefinition):
        Tool(name="none", description="", execute=print)


def test_mcp_tools_are_namespaced_by_server_in_names_the_model_accepts():
    assert tool_name("github", "create_issue") == "github__create_issue"
    assert tool_name("fs", "read.file/v2") == "fs__read_file_v2"
    long = tool_name("server", "t" * 100)
    assert len(long) == 64
    assert long != tool_name("server", "t" * 99)
    listed = types.Tool(name="read", description="Read.", input_schema={"properties": {}})
    tool = as_tool(McpServer(name="fs", url=URL, needs_approval=["read"]), listed)
    assert (tool.name, tool.needs_approval, tool.json_schema()["type"]) == (
        "fs__read",
        True,
        "object",
    )


def text(value: str) -> types.TextContent:
    return types.TextContent(text=value)


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (types.CallToolResult(content=[text("a"), text("b")]), "a\nb"),
        (types.CallToolResult(content=[text('{"n": 1}')], structured_content={"n": 1}), {"n": 1}),
        (
            types.CallToolResult(
                content=[text("see"), types.ImageContent(data="AAAA", mime_type="image/png")]
            ),
            {
                "content": [
                    {"type": "text", "text": "see"},
                    {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                ]
            },
        ),
        (
            types.CallToolResult(
                content=[
                    types.EmbeddedResource(
                        resource=types.TextResourceContents(
                            uri="file:///notes.txt", mime_type="text/plain", text="hi"
                        )
                    )
                ],
                structured_content={"ok": True},
            ),
            {
                "content": [
                    {
                        "type": "resource",
                        "resource": {
                            "uri": "file:///notes.txt",
                            "mimeType": "text/plain",
                            "text": "hi",
                        },
                    }
                ],
                "structuredContent": {"ok": True},
            },
        ),
    ],
)  # fmt: skip
def test_results_become_json_the_model_reads(result, expected):
    assert tool_result(result) == expected


def test_an_error_result_raises_with_the_servers_text():
    with pytest.raises(McpToolFailed, match=r"^no such repo$"):
        tool_result(types.CallToolResult(content=[text("no such repo")], is_error=True))


def test_errors_a_server_sends_back_have_its_secrets_masked():
    server = McpServer(name="a", url=URL, headers={"Authorization": "Bearer s3cret-key", "X": "1"})

    assert server.redact("refused Bearer s3cret-key for 1 call") == "refused [redacted] for 1 call"
