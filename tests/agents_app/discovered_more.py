"""A second module for registry discovery tests."""

from agents_app.definitions.agent import Agent
from agents_app.definitions.registry import get_registry

get_registry().register(Agent(name="discovered-more"))
