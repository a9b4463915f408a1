"""The landing page, `/`: the registered agents with a link to each one's chat page, the admin and
the API docs, and who is signed in.

The agents are listed to signed-in users only, as the API lists nothing to anyone else: an
agent's name and description can say more about a deployment than its owner means to publish.
"""

from dataclasses import dataclass

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_safe

from agents_app.definitions.registry import get_registry


@dataclass(frozen=True, kw_only=True)
class AgentLink:
    """A registered agent as the landing page lists it."""

    agent_type: str
    description: str
    chat_url: str


def agent_links() -> list[AgentLink]:
    """Return every registered agent, sorted by type, with the address of its chat page.

    An agent a factory builds has no description until it is built, so it is listed without one.
    """
    registry = get_registry()
    return [
        AgentLink(
            agent_type=agent_type,
            description=agent.description if (agent := registry.get(agent_type)) else "",
            chat_url=reverse("chat-page", args=[agent_type]),
        )
        for agent_type in registry.registered_types()
    ]


@require_safe
def landing_page(request: HttpRequest) -> HttpResponse:
    """Render the landing page; the agents only for a signed-in user."""
    agents = agent_links() if request.user.is_authenticated else []
    return render(request, "helix/landing.html", {"agents": agents})
