"""MCP servers an agent uses: how to reach one, which of its tools to offer, and how calls run.

A server is reached over streamable HTTP (`url`, with `headers`) or by starting a local process
that speaks MCP over stdio (`command`, `args`, `env`). Header values and the environment may hold
secrets: they are left out of `repr` and never shown; `header_names` is what may be shown.
"""

import hashlib
import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

# A server's name prefixes its tools' names (`<server>__<tool>`), so it may not hold `__`.
SERVER_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9-]|_(?!_)){0,29}$")
SEPARATOR = "__"
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$")
HEADER_VALUE = re.compile(r"^[\t\x20-\x7e\x80-\xff]{0,8192}$")
DEFAULT_TIMEOUT_SECONDS = 60.0
# Shorter values are not masked in error messages: they would mask ordinary words.
MIN_REDACTED = 6

Transport = Literal["streamable-http", "stdio"]


class InvalidServer(ValueError):
    """An MCP server's configuration breaks a rule; raised when it is made."""


@dataclass(frozen=True, kw_only=True)
class McpServer:
    """An MCP server: where it is, which of its tools the agent gets, and how they run.

    `allowed_tools` (only these) or `denied_tools` (all but these) filter the server's tools by
    their own names. `needs_approval` is `True` for every tool of the server, or the names of
    the tools a person must approve. A call fails when it takes longer than `timeout_seconds`.
    """

    name: str
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False, hash=False)
    command: str | None = None
    args: Sequence[str] = ()
    env: Mapping[str, str] | None = field(default=None, repr=False, hash=False)
    allowed_tools: Collection[str] | None = None
    denied_tools: Collection[str] = ()
    needs_approval: bool | Collection[str] = False
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not SERVER_NAME_PATTERN.fullmatch(self.name):
            raise InvalidServer(
                f"MCP server name {self.name!r} must be 1 to 30 letters, digits, hyphens or "
                "single underscores, starting with a letter or digit."
            )
        where = f"MCP server {self.name!r}"
        if (self.url is None) == (self.command is None):
            raise InvalidServer(f"{where}: give either a url or a command.")
        if self.url is not None:
            if not isinstance(self.url, str):
                raise InvalidServer(f"{where}: the url must be text.")
            parts = urlsplit(self.url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise InvalidServer(f"{where}: the url must be http(s)://host/...")
            if parts.username or parts.password:
                raise InvalidServer(f"{where}: put credentials in headers, not in the url.")
        elif self.headers:
            raise InvalidServer(f"{where}: headers are for servers reached by url.")
        if self.url is not None and (self.args or self.env):
            raise InvalidServer(f"{where}: args and env are for servers started by a command.")
        if self.allowed_tools is not None and self.denied_tools:
            raise InvalidServer(f"{where}: give allowed_tools or denied_tools, not both.")
        timeout = self.timeout_seconds
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise InvalidServer(f"{where}: timeout_seconds must be a positive number.")
        for what, mapping in (("headers", self.headers), ("env", self.env or {})):
            if not isinstance(mapping, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()
            ):
                raise InvalidServer(f"{where}: {what} must map strings to strings.")
        for header, value in self.headers.items():  # Never repeat the value: it may be a secret.
            if not HEADER_NAME.fullmatch(header) or not HEADER_VALUE.fullmatch(value):
                raise InvalidServer(f"{where}: header {header[:64]!r} is not a valid header.")
        approval = None if isinstance(self.needs_approval, bool) else self.needs_approval
        for what, names in (
            ("allowed_tools", self.allowed_tools),
            ("denied_tools", self.denied_tools),
            ("needs_approval", approval),
        ):
            if names is not None and not _names(names):
                raise InvalidServer(f"{where}: {what} must be a list of tool names.")
        if self.command is not None and not (
            isinstance(self.command, str) and self.command and _names(self.args)
        ):
            raise InvalidServer(f"{where}: command and args must be strings.")
        object.__setattr__(self, "headers", dict(self.headers))
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "env", None if self.env is None else dict(self.env))
        object.__setattr__(
            self,
            "allowed_tools",
            None if self.allowed_tools is None else frozenset(self.allowed_tools),
        )
        object.__setattr__(self, "denied_tools", frozenset(self.denied_tools))
        if not isinstance(self.needs_approval, bool):
            object.__setattr__(self, "needs_approval", frozenset(self.needs_approval))

    @property
    def transport(self) -> Transport:
        """Return how the server is reached."""
        return "streamable-http" if self.url is not None else "stdio"

    @property
    def address(self) -> str:
        """Return where the server is, fit to show: its url, or `stdio:` and the command."""
        return self.url if self.url is not None else f"stdio:{self.command}"

    @property
    def header_names(self) -> list[str]:
        """Return the names of the headers sent to the server, sorted; never their values."""
        return sorted(self.headers)

    @property
    def connection_key(self) -> str:
        """Return a digest of what the connection depends on; equal servers share one.

        Secrets go into the digest only, which is safe to log.
        """
        identity = {
            "url": self.url,
            "headers": sorted(self.headers.items()),
            "command": self.command,
            "args": list(self.args),
            "env": sorted((self.env or {}).items()),
        }
        return hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:32]

    def offers(self, tool_name: str) -> bool:
        """Return whether the agent gets the server's tool `tool_name`."""
        if self.allowed_tools is not None:
            return tool_name in self.allowed_tools
        return tool_name not in self.denied_tools

    def approval_needed(self, tool_name: str) -> bool:
        """Return whether a person approves each call of the server's tool `tool_name`."""
        if isinstance(self.needs_approval, bool):
            return self.needs_approval
        return tool_name in self.needs_approval

    def redact(self, text: str) -> str:
        """Return `text` with the server's header and environment values masked.

        Errors a server sends back may echo what it was sent; they are logged and shown.
        """
        for secret in (*self.headers.values(), *(self.env or {}).values()):
            if len(secret) >= MIN_REDACTED:
                text = text.replace(secret, "[redacted]")
        return text

    def describe(self) -> dict[str, Any]:
        """Return the configuration fit to show (camelCase keys): header names, no values."""
        return {
            "name": self.name,
            "transport": self.transport,
            "url": self.address,
            "headerNames": self.header_names,
            "allowedTools": None if self.allowed_tools is None else sorted(self.allowed_tools),
            "deniedTools": sorted(self.denied_tools),
            "needsApproval": (
                self.needs_approval
                if isinstance(self.needs_approval, bool)
                else sorted(self.needs_approval)
            ),
            "timeoutSeconds": self.timeout_seconds,
        }


def _names(names: Any) -> bool:
    """Return whether `names` is a collection of strings (and not a string itself)."""
    return (
        isinstance(names, Collection)
        and not isinstance(names, str | bytes | Mapping)
        and all(isinstance(name, str) for name in names)
    )
