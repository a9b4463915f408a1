"""The agent registry of reference 001, and discovery from HELIX["AGENTS"]."""

import threading

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from agents_app.definitions import Agent
from agents_app.registry import AgentFactoryContext, AgentNotFound, AgentRegistry, get_registry

CONTEXT = AgentFactoryContext(session_id="s-1", run_id="r-1", user_id="u-1")


def test_static_agents_register_resolve_and_unregister():
    registry = AgentRegistry()
    agent = Agent(name="plain")
    registry.register(agent)

    assert registry.resolve("plain", CONTEXT) is agent
    assert registry.get("plain") is agent
    assert registry.has("plain")
    with pytest.raises(ValueError, match="already registered"):
        registry.register(Agent(name="plain"))
    assert registry.unregister("plain") is True
    assert registry.unregister("plain") is False
    assert not registry.has("plain")


def test_factories_build_per_execution_and_win_over_static_agents():
    registry = AgentRegistry()
    seen = []

    def build(context: AgentFactoryContext) -> Agent:
        seen.append(context)
        return Agent(name="made", system_prompt=f"For {context.user_id}.")

    registry.register_factory("made", build)

    assert registry.resolve("made", CONTEXT).system_prompt == "For u-1."
    assert seen == [CONTEXT]
    assert registry.get("made") is None  # Static agents only.
    with pytest.raises(ValueError, match="already registered"):
        registry.register(Agent(name="made"))


def test_a_factory_must_build_an_agent_of_its_type():
    registry = AgentRegistry()
    registry.register_factory("wanted", lambda context: Agent(name="other"))

    with pytest.raises(TypeError, match="wanted"):
        registry.resolve("wanted", CONTEXT)


def test_replace_swaps_a_static_agent_but_never_a_factory():
    registry = AgentRegistry()
    assert registry.replace(Agent(name="swap")) is False
    newer = Agent(name="swap", description="newer")
    assert registry.replace(newer) is True
    assert registry.get("swap") is newer
    registry.register_factory("built", lambda context: Agent(name="built"))
    with pytest.raises(ValueError, match="factory"):
        registry.replace(Agent(name="built"))


def test_an_unknown_type_names_the_available_ones():
    registry = AgentRegistry()
    registry.register(Agent(name="b"))
    registry.register_factory("a", lambda context: Agent(name="a"))

    with pytest.raises(AgentNotFound) as caught:
        registry.resolve("c", CONTEXT)

    assert (caught.value.agent_type, caught.value.available_types) == ("c", ["a", "b"])
    assert caught.value.http_status == 404
    registry.clear()
    assert registry.registered_types() == []


def test_concurrent_registration_keeps_every_agent():
    registry = AgentRegistry()
    threads = [
        threading.Thread(target=registry.register, args=(Agent(name=f"agent-{n}"),))
        for n in range(32)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert registry.registered_types() == sorted(f"agent-{n}" for n in range(32))


def test_the_default_registry_imports_the_modules_helix_names():
    with override_settings(HELIX={"AGENTS": ["tests.agents_app.agents"]}):
        assert get_registry().has("talker")
    with (
        override_settings(HELIX={"AGENTS": ["tests.agents_app.no_such_module"]}),
        pytest.raises(ImproperlyConfigured, match="no_such_module"),
    ):
        get_registry()
