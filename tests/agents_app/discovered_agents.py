"""Agents that registry discovery tests name in ``HELIX["AGENTS"]``: registered on import."""

from agents_app.definitions.agent import Agent
from agents_app.definitions.registry import AgentFactoryContext, get_registry

discovered = Agent(name="discovered", description="Registered when this module is imported.")


def build(context: AgentFactoryContext) -> Agent:
    return Agent(name="discovered-by-factory", description=f"Built for {context.session_id}.")


get_registry().register(discovered)
get_registry().register_factory("discovered-by-factory", build)
