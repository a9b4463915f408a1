"""The app's agents, which Django's start registers (`agents_app.definitions.registry`)."""

from agents_app.definitions.agent import Agent
from agents_app.definitions.registry import get_registry

get_registry().register(Agent(name="from-an-installed-app"))
