"""A module for registry discovery tests that registers an agent, then fails to import."""

from agents_app.definitions.agent import Agent
from agents_app.definitions.registry import get_registry

get_registry().register(Agent(name="half-registered"))

import helix_tests_no_such_dependency  # noqa: E402, F401
