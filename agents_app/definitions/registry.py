"""The agent registry (reference 001 "AgentRegistry with Factories").

Static agents are registered by name; factories build an agent per execution from an
`AgentFactoryContext`. `resolve` tries the factory first, then the static agent; `get` knows
static agents only.

The default registry, `get_registry()`, holds the agents of the `agents` module of every
installed app, which `autodiscover` imports when Django starts (as the admin imports `admin`
modules), and of the modules ``HELIX["AGENTS"]`` names; each registers its agents when
imported, with `get_registry().register(...)`. Agents of installed apps stay, as do any
registered directly; those of ``HELIX["AGENTS"]`` follow the setting: after it changes
(``override_settings``), the agents of modules no longer named leave, and those of newly named
modules arrive; a module is imported once, and what it registered then is put back whenever it
is named again.
"""

import importlib
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import autodiscover_modules

from agents_app.definitions.agent import NAME_PATTERN, Agent, InvalidDefinition
from sessions_app.conf import helix_setting
from sessions_app.errors import HelixError
from sessions_app.stores.types import SessionState


class AgentNotFound(HelixError):
    """No agent, static or by factory, is registered under the type."""

    code = "agent-not-found"
    http_status = 404

    def __init__(self, agent_type: str, available_types: list[str]) -> None:
        super().__init__(
            f"No agent of type {agent_type!r}; available: {', '.join(available_types) or 'none'}.",
            agent_type=agent_type,
            available_types=available_types,
        )
        self.agent_type = agent_type
        self.available_types = available_types


def kebab_case(name: str) -> str:
    """Return `name` as the kebab-case agent name of client URLs (`GameAgent` -> `game-agent`).

    The same rule as the reference's clients and router use: a name all in capitals is only
    lower-cased; otherwise each capital starts a new word (`HTTPAgent` -> `h-t-t-p-agent`).
    Underscores become hyphens.
    """
    if name.upper() == name and name.lower() != name:
        return name.lower().replace("_", "-")
    kebab = re.sub("[A-Z]", lambda capital: "-" + capital.group().lower(), name)
    return kebab.removeprefix("-").replace("_", "-").removesuffix("-")


class AgentAlreadyRegistered(ValueError):
    """The agent type is taken (or, for `replace`, held by a factory)."""


@dataclass(frozen=True, kw_only=True)
class AgentFactoryContext:
    """What a factory builds an agent from (reference 001; `env` becomes Django's settings)."""

    session_id: str
    run_id: str
    user_id: str | None = None
    settings: Any = field(default=django_settings, repr=False, compare=False)


AgentFactory = Callable[[AgentFactoryContext], Agent]


class AgentRegistry:
    """Agents by type: static registrations and factories, safe to use from any thread."""

    def __init__(self) -> None:
        self._agents: dict[str, Agent] = {}
        self._factories: dict[str, AgentFactory] = {}
        self._lock = threading.RLock()

    def register(self, agent: Agent) -> None:
        """Register a static agent; raise `AgentAlreadyRegistered` if its name is taken."""
        if not isinstance(agent, Agent):
            raise TypeError(f"Only an Agent can be registered, not {agent!r}.")
        with self._lock:
            self._refuse_taken(agent.name)
            self._agents[agent.name] = agent

    def register_factory(self, agent_type: str, factory: AgentFactory) -> None:
        """Register a factory that builds the `agent_type` agent of each execution.

        Raise `AgentAlreadyRegistered` if the type is taken.
        """
        if not isinstance(agent_type, str) or not NAME_PATTERN.fullmatch(agent_type):
            raise InvalidDefinition(
                f"Agent type {agent_type!r} must be 1 to 64 letters, digits, underscores or "
                "hyphens."
            )
        if not callable(factory):
            raise TypeError(f"The factory of {agent_type!r} must be callable.")
        with self._lock:
            self._refuse_taken(agent_type)
            self._factories[agent_type] = factory

    def replace(self, agent: Agent) -> bool:
        """Put `agent` in place of its static registration; return whether there was one.

        Raise `AgentAlreadyRegistered` if a factory holds the name: `unregister` it first.
        """
        if not isinstance(agent, Agent):
            raise TypeError(f"Only an Agent can be registered, not {agent!r}.")
        with self._lock:
            if agent.name in self._factories:
                raise AgentAlreadyRegistered(
                    f"A factory holds agent type {agent.name!r}; unregister it before replacing it."
                )
            existed = agent.name in self._agents
            self._agents[agent.name] = agent
            return existed

    def resolve(self, agent_type: str, context: AgentFactoryContext) -> Agent:
        """Return the `agent_type` agent: its factory's build for `context`, else the static one.

        Raise `AgentNotFound` if neither is registered, and `TypeError` if the factory builds
        something other than an Agent named `agent_type`.
        """
        with self._lock:
            factory = self._factories.get(agent_type)
            agent = self._agents.get(agent_type)
        if factory is not None:
            built = factory(context)
            if not isinstance(built, Agent) or built.name != agent_type:
                got = f"Agent {built.name!r}" if isinstance(built, Agent) else repr(built)
                raise TypeError(
                    f"The factory of {agent_type!r} must return an Agent named {agent_type!r}, "
                    f"not {got}."
                )
            return built
        if agent is None:
            raise AgentNotFound(agent_type, self.registered_types())
        return agent

    def get(self, agent_type: str) -> Agent | None:
        """Return the static agent of `agent_type`, or None; factories are not consulted."""
        with self._lock:
            return self._agents.get(agent_type)

    def has(self, agent_type: str) -> bool:
        """Return whether `agent_type` is registered, statically or by a factory."""
        with self._lock:
            return agent_type in self._agents or agent_type in self._factories

    def unregister(self, agent_type: str) -> bool:
        """Remove `agent_type`'s registration, static or factory; return whether there was one."""
        with self._lock:
            agent = self._agents.pop(agent_type, None)
            factory = self._factories.pop(agent_type, None)
            return agent is not None or factory is not None

    def find_by_kebab(self, kebab: str) -> str | None:
        """Return the registered type whose `kebab_case` is `kebab`, or None.

        A type named `kebab` itself wins; among others that match, the first in sorted order.
        Only kebab-case names are found: `GameAgent` is found as `game-agent`, never as itself.
        """
        types = self.registered_types()
        if kebab in types and kebab_case(kebab) == kebab:
            return kebab
        return next((agent_type for agent_type in types if kebab_case(agent_type) == kebab), None)

    def registered_types(self) -> list[str]:
        """Return every registered type, sorted."""
        with self._lock:
            return sorted({*self._agents, *self._factories})

    def clear(self) -> None:
        """Remove every registration."""
        with self._lock:
            self._agents.clear()
            self._factories.clear()

    def _refuse_taken(self, agent_type: str) -> None:
        if agent_type in self._agents:
            raise AgentAlreadyRegistered(f"An agent of type {agent_type!r} is already registered.")
        if agent_type in self._factories:
            raise AgentAlreadyRegistered(
                f"An agent of type {agent_type!r} is already registered, by a factory."
            )

    # For discovery: registrations as (type -> the Agent or factory registered under it).

    def _entries(self) -> dict[str, object]:
        with self._lock:
            return {**self._agents, **self._factories}

    def _restore(self, agent_type: str, entry: object) -> None:
        """Register `entry` under `agent_type` again, unless something else holds the type."""
        with self._lock:
            if not self.has(agent_type):
                store = self._agents if isinstance(entry, Agent) else self._factories
                store[agent_type] = entry

    def _withdraw(self, agent_type: str, entry: object) -> None:
        """Remove `entry` from under `agent_type`, if it is what the type still holds."""
        with self._lock:
            if self._entries().get(agent_type) is entry:
                self.unregister(agent_type)


class _Discovery:
    """Keeps the default registry in step with ``HELIX["AGENTS"]``."""

    def __init__(self, registry: AgentRegistry) -> None:
        self.registry = registry
        self.lock = threading.RLock()
        self.installed: tuple[str, ...] = ()
        self.stale = True
        self.busy = False  # A listed module, while imported, calls get_registry() again.
        self.made: dict[str, dict[str, object]] = {}  # What each module registered on import.

    def ensure(self, modules: tuple[str, ...]) -> None:
        """Make the registry hold the agents of `modules` and of no other discovered module."""
        with self.lock:
            if self.busy or (not self.stale and modules == self.installed):
                return
            self.busy = True
            try:
                for module in self.installed:
                    if module not in modules:
                        for agent_type, entry in self.made[module].items():
                            self.registry._withdraw(agent_type, entry)
                self.installed = tuple(module for module in self.installed if module in modules)
                for module in modules:
                    self._install(module)
                    if module not in self.installed:
                        self.installed += (module,)
                self.stale = False
            finally:
                self.busy = False

    def _install(self, module: str) -> None:
        if module in self.made:
            for agent_type, entry in self.made[module].items():
                self.registry._restore(agent_type, entry)
            return
        before = self.registry._entries()
        try:
            _import(module)
        except BaseException:  # Undo its partial registrations, so that a retry can succeed.
            for agent_type, entry in self._made_since(before).items():
                self.registry._withdraw(agent_type, entry)
            raise
        self.made[module] = self._made_since(before)

    def _made_since(self, before: dict[str, object]) -> dict[str, object]:
        return {
            agent_type: entry
            for agent_type, entry in self.registry._entries().items()
            if before.get(agent_type) is not entry
        }


def _import(name: str) -> None:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name == name or name.startswith(f"{error.name}."):
            raise ImproperlyConfigured(
                f'HELIX["AGENTS"] names the module {name!r}, which does not exist.'
            ) from None
        raise


_default = AgentRegistry()
_discovery = _Discovery(_default)


def session_agent(session: SessionState) -> Agent:
    """Return the agent of `session`, built for it outside a run."""
    return get_registry().resolve(
        session.agent_type,
        AgentFactoryContext(session_id=session.session_id, run_id="", user_id=session.user_id),
    )


def autodiscover() -> None:
    """Import the `agents` module of every installed app, then the modules ``HELIX["AGENTS"]``
    names, so that the default registry holds their agents (`AgentsAppConfig.ready` calls it).

    An import error in any of them is raised, as the admin raises one in an `admin` module.
    """
    autodiscover_modules("agents")
    get_registry()


def get_registry() -> AgentRegistry:
    """Return the default registry, holding the agents of the modules ``HELIX["AGENTS"]`` names.

    Raise `ImproperlyConfigured` if one of those modules does not exist.
    """
    modules = helix_setting("AGENTS", ())
    if isinstance(modules, str):
        raise ImproperlyConfigured('HELIX["AGENTS"] must be a list of module paths, not a string.')
    _discovery.ensure(tuple(modules))
    return _default


@receiver(setting_changed)
def _rediscover(*, setting: str, **kwargs: Any) -> None:
    if setting == "HELIX":
        with _discovery.lock:
            _discovery.stale = True
