"""The agent registry (reference 001 "AgentRegistry with Factories").

Static agents are registered by name; factories build an agent per execution from an
`AgentFactoryContext`. `resolve` tries the factory first. The default registry, `get_registry()`,
imports the modules named in ``HELIX["AGENTS"]`` on first use; each registers its agents.
"""

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from agents_app.definitions import Agent
from sessions_app.conf import helix_setting
from sessions_app.errors import HelixError


class AgentNotFound(HelixError):
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


@dataclass(frozen=True, kw_only=True)
class AgentFactoryContext:
    session_id: str
    run_id: str
    user_id: str | None = None


AgentFactory = Callable[[AgentFactoryContext], Agent]


class AgentRegistry:
    """Agents by type: static registrations and factories, safe to use from any thread."""

    def __init__(self) -> None:
        self._agents: dict[str, Agent] = {}
        self._factories: dict[str, AgentFactory] = {}
        self._lock = threading.RLock()

    def register(self, agent: Agent) -> None:
        """Register a static agent; raise `ValueError` if its name is taken."""
        with self._lock:
            if self.has(agent.name):
                raise ValueError(f"An agent of type {agent.name!r} is already registered.")
            self._agents[agent.name] = agent

    def register_factory(self, agent_type: str, factory: AgentFactory) -> None:
        """Register a factory that builds `agent_type` agents; raise if the type is taken."""
        with self._lock:
            if self.has(agent_type):
                raise ValueError(f"An agent of type {agent_type!r} is already registered.")
            self._factories[agent_type] = factory

    def replace(self, agent: Agent) -> bool:
        """Put `agent` in place of its static registration; return whether there was one.

        Raises `ValueError` if a factory holds the name: unregister it first.
        """
        with self._lock:
            if agent.name in self._factories:
                raise ValueError(
                    f"A factory holds {agent.name!r}; unregister it before replacing it."
                )
            existed = agent.name in self._agents
            self._agents[agent.name] = agent
            return existed

    def resolve(self, agent_type: str, context: AgentFactoryContext) -> Agent:
        """Return the agent of `agent_type`: built by its factory, else the static one."""
        with self._lock:
            factory = self._factories.get(agent_type)
            agent = self._agents.get(agent_type)
        if factory is not None:
            agent = factory(context)
            if not isinstance(agent, Agent) or agent.name != agent_type:
                raise TypeError(f"The factory of {agent_type!r} must return an Agent of that name.")
        if agent is None:
            raise AgentNotFound(agent_type, self.registered_types())
        return agent

    def get(self, agent_type: str) -> Agent | None:
        """Return the static agent of `agent_type`, if any (factories are not consulted)."""
        with self._lock:
            return self._agents.get(agent_type)

    def has(self, agent_type: str) -> bool:
        """Return whether `agent_type` is registered, statically or by factory."""
        with self._lock:
            return agent_type in self._agents or agent_type in self._factories

    def unregister(self, agent_type: str) -> bool:
        """Remove `agent_type`'s registration; return whether there was one."""
        with self._lock:
            found = self._agents.pop(agent_type, None) or self._factories.pop(agent_type, None)
            return found is not None

    def registered_types(self) -> list[str]:
        """Return every registered type, sorted."""
        with self._lock:
            return sorted({*self._agents, *self._factories})

    def clear(self) -> None:
        """Remove every registration."""
        with self._lock:
            self._agents.clear()
            self._factories.clear()


_default = AgentRegistry()
_discovered: tuple[str, ...] | None = None
_discovery_lock = threading.RLock()


def get_registry() -> AgentRegistry:
    """Return the default registry, having imported the modules ``HELIX["AGENTS"]`` names."""
    global _discovered
    modules = tuple(helix_setting("AGENTS", ()))
    with _discovery_lock:
        if _discovered != modules:
            _discovered = modules  # Before importing: the modules call back in.
            for name in modules:
                _import(name)
    return _default


def _import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name and name.startswith(error.name):
            raise ImproperlyConfigured(
                f'HELIX["AGENTS"] names {name!r}, which does not exist.'
            ) from None
        raise


@receiver(setting_changed)
def _rediscover(*, setting: str, **kwargs: Any) -> None:
    global _discovered
    if setting == "HELIX":
        with _discovery_lock:
            _discovered = None
