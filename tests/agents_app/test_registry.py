"""The agent registry of reference 001, and discovery from HELIX["AGENTS"]."""

import dataclasses
import threading
import time
from collections.abc import Callable

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from agents_app.definitions.agent import Agent, InvalidDefinition
from agents_app.definitions.hooks import AgentHooks
from agents_app.definitions.registry import (
    AgentAlreadyRegistered,
    AgentFactoryContext,
    AgentNotFound,
    AgentRegistry,
    get_registry,
)

CONTEXT = AgentFactoryContext(session_id="s-1", run_id="r-1", user_id="u-1")


def test_static_agents_register_resolve_and_unregister():
    registry = AgentRegistry()
    agent = Agent(name="plain")
    registry.register(agent)

    assert registry.resolve("plain", CONTEXT) is agent
    assert registry.get("plain") is agent
    assert registry.has("plain")
    assert registry.unregister("plain") is True
    assert registry.unregister("plain") is False
    assert not registry.has("plain")
    assert registry.get("plain") is None


def test_a_taken_type_cannot_be_registered_again_statically_or_by_factory():
    registry = AgentRegistry()
    registry.register(Agent(name="static"))
    registry.register_factory("built", lambda context: Agent(name="built"))

    for agent_type in ("static", "built"):
        with pytest.raises(AgentAlreadyRegistered, match=agent_type):
            registry.register(Agent(name=agent_type))
        with pytest.raises(AgentAlreadyRegistered, match=agent_type):
            registry.register_factory(agent_type, Agent)
    assert issubclass(AgentAlreadyRegistered, ValueError)


def test_only_agents_and_callables_with_valid_types_can_be_registered():
    registry = AgentRegistry()

    with pytest.raises(TypeError, match="Agent"):
        registry.register({"name": "dict"})
    with pytest.raises(TypeError, match="Agent"):
        registry.replace("text")
    with pytest.raises(InvalidDefinition, match="bad type"):
        registry.register_factory("bad type", lambda context: Agent(name="x"))
    with pytest.raises(TypeError, match="callable"):
        registry.register_factory("not-callable", Agent(name="not-callable"))
    assert registry.registered_types() == []


def test_a_factory_builds_a_fresh_agent_for_each_execution_context():
    registry = AgentRegistry()
    seen: list[AgentFactoryContext] = []

    def build(context: AgentFactoryContext) -> Agent:
        seen.append(context)
        return Agent(name="made", system_prompt=f"For {context.user_id} in {context.session_id}.")

    registry.register_factory("made", build)
    other = AgentFactoryContext(session_id="s-2", run_id="r-2")

    first = registry.resolve("made", CONTEXT)
    second = registry.resolve("made", other)

    assert first.system_prompt == "For u-1 in s-1."
    assert second.system_prompt == "For None in s-2."
    assert seen == [CONTEXT, other]
    assert registry.has("made")
    assert registry.get("made") is None  # get() knows static agents only.


def test_the_factory_context_carries_djangos_settings_by_default():
    assert CONTEXT.settings is settings
    assert CONTEXT.user_id == "u-1"
    assert AgentFactoryContext(session_id="s", run_id="r").user_id is None


@pytest.mark.parametrize(
    ("built", "problem"),
    [(lambda context: Agent(name="other"), "'other'"), (lambda context: None, "None")],
)
def test_a_factory_must_build_an_agent_named_as_its_type(built, problem):
    registry = AgentRegistry()
    registry.register_factory("wanted", built)

    with pytest.raises(TypeError, match=f"'wanted'.*{problem}"):
        registry.resolve("wanted", CONTEXT)


def test_replace_swaps_a_static_agent_and_says_whether_there_was_one():
    registry = AgentRegistry()
    original = Agent(name="swap")

    assert registry.replace(original) is False
    assert registry.get("swap") is original
    with_hooks = dataclasses.replace(original, hooks=AgentHooks(on_complete=print))
    assert registry.replace(with_hooks) is True
    assert registry.get("swap") is with_hooks
    assert registry.resolve("swap", CONTEXT) is with_hooks


def test_replace_never_replaces_a_factory():
    registry = AgentRegistry()
    registry.register_factory("built", lambda context: Agent(name="built", description="made"))

    with pytest.raises(AgentAlreadyRegistered, match="factory"):
        registry.replace(Agent(name="built", description="static"))

    assert registry.resolve("built", CONTEXT).description == "made"
    assert registry.get("built") is None
    assert registry.unregister("built") is True
    assert registry.replace(Agent(name="built", description="static")) is False
    assert registry.resolve("built", CONTEXT).description == "static"


def test_an_unknown_type_names_the_available_ones():
    registry = AgentRegistry()
    registry.register(Agent(name="b"))
    registry.register_factory("a", lambda context: Agent(name="a"))

    with pytest.raises(AgentNotFound) as caught:
        registry.resolve("c", CONTEXT)

    error = caught.value
    assert (error.agent_type, error.available_types) == ("c", ["a", "b"])
    assert (error.code, error.http_status) == ("agent-not-found", 404)
    assert error.details == {"agent_type": "c", "available_types": ["a", "b"]}
    assert "'c'" in str(error)
    assert "a, b" in str(error)
    assert registry.get("c") is None
    assert not registry.has("c")


def test_unregister_removes_factories_too_and_clear_removes_everything():
    registry = AgentRegistry()
    registry.register(Agent(name="zeta"))
    registry.register_factory("alpha", lambda context: Agent(name="alpha"))
    registry.register(Agent(name="mid"))

    assert registry.registered_types() == ["alpha", "mid", "zeta"]
    assert registry.unregister("alpha") is True
    assert not registry.has("alpha")
    with pytest.raises(AgentNotFound):
        registry.resolve("alpha", CONTEXT)
    registry.clear()
    assert registry.registered_types() == []
    assert not registry.has("zeta")


class SlowName(str):
    """An agent type whose hashing gives up the GIL: every dict lookup of it is a chance for
    another thread to run, as a busy machine would give one anywhere."""

    def __hash__(self) -> int:
        time.sleep(0.0002)
        return str.__hash__(self)


def _race(threads: int, target: Callable[[int], None]) -> list[BaseException]:
    """Run `target(n)` in `threads` threads released together; return what they raised."""
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def run(n: int) -> None:
        barrier.wait()
        try:
            target(n)
        except BaseException as error:
            errors.append(error)

    workers = [threading.Thread(target=run, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return errors


def test_of_concurrent_registrations_of_one_type_exactly_one_wins():
    registry = AgentRegistry()
    agents = [Agent(name=SlowName("contested"), description=str(n)) for n in range(8)]

    def register(n: int) -> None:
        if n % 2:
            registry.register(agents[n])
        else:
            registry.register_factory(SlowName("contested"), lambda context: agents[n])

    errors = _race(8, register)

    assert len(errors) == 7
    assert all(isinstance(error, AgentAlreadyRegistered) for error in errors)
    assert registry.registered_types() == ["contested"]


def test_a_type_raced_by_replace_and_a_factory_ends_held_by_one_of_them_only():
    registry = AgentRegistry()
    failed: set[int] = set()

    def replace_or_build(n: int) -> None:
        try:
            if n % 2:
                registry.replace(Agent(name=SlowName("raced")))
            else:
                registry.register_factory(SlowName("raced"), lambda context: Agent(name="raced"))
        except AgentAlreadyRegistered:
            failed.add(n)

    assert _race(8, replace_or_build) == []

    factories_registered = len({0, 2, 4, 6} - failed)
    held_statically = registry.get("raced") is not None
    assert (factories_registered, held_statically) in {(1, False), (0, True)}


# Discovery: the default registry follows HELIX["AGENTS"].

DISCOVERED = "tests.agents_app.discovered_agents"
MORE = "tests.agents_app.discovered_more"


def test_the_default_registry_holds_the_agents_of_the_modules_helix_names():
    with override_settings(HELIX={"AGENTS": [DISCOVERED]}):
        registry = get_registry()

        assert registry.get("discovered") is not None
        built = registry.resolve("discovered-by-factory", CONTEXT)
        assert built.description == "Built for s-1."
        assert get_registry() is registry


def test_agents_of_modules_no_longer_named_leave_and_return_when_named_again():
    with override_settings(HELIX={"AGENTS": [DISCOVERED, MORE]}):
        assert {"discovered", "discovered-by-factory", "discovered-more"} <= set(
            get_registry().registered_types()
        )
        with override_settings(HELIX={"AGENTS": [MORE]}):
            assert not get_registry().has("discovered")
            assert not get_registry().has("discovered-by-factory")
            assert get_registry().has("discovered-more")
        # Imported once already: its registrations are put back, not made again.
        assert get_registry().has("discovered")
        assert get_registry().has("discovered-by-factory")
    assert not get_registry().has("discovered")
    assert not get_registry().has("discovered-more")


def test_agents_registered_directly_survive_a_change_of_the_setting():
    registry = get_registry()
    registry.register(Agent(name="registered-directly"))
    try:
        with override_settings(HELIX={"AGENTS": [DISCOVERED]}):
            assert get_registry().has("registered-directly")
        assert get_registry().has("registered-directly")
    finally:
        registry.unregister("registered-directly")


def test_a_missing_module_is_named_in_a_configuration_error():
    with (
        override_settings(HELIX={"AGENTS": ["tests.agents_app.no_such_module"]}),
        pytest.raises(ImproperlyConfigured, match=r"'tests\.agents_app\.no_such_module'"),
    ):
        get_registry()


def test_a_module_failing_its_own_import_raises_its_error_and_registers_nothing():
    for _ in range(2):  # Again, the same error: its half-made registration was undone.
        with (
            override_settings(HELIX={"AGENTS": ["tests.agents_app.discovered_broken"]}),
            pytest.raises(ModuleNotFoundError, match="helix_tests_no_such_dependency"),
        ):
            get_registry()
        with override_settings(HELIX={"AGENTS": []}):
            assert not get_registry().has("half-registered")


def test_the_setting_must_be_a_list_of_modules():
    with (
        override_settings(HELIX={"AGENTS": DISCOVERED}),
        pytest.raises(ImproperlyConfigured, match="list"),
    ):
        get_registry()
