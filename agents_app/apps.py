from django.apps import AppConfig
from django.core import checks


class AgentsAppConfig(AppConfig):
    name = "agents_app"
    verbose_name = "Agents"

    def ready(self) -> None:
        """Check the site, trace if configured, and discover the agents.

        Tracing starts here, before a server loads its middleware (Django's tracing is one);
        the agents are those of every installed app's `agents` module and of the modules
        ``HELIX["AGENTS"]`` names (`agents_app.definitions.registry.autodiscover`).
        """
        from agents_app.checks import check_site
        from agents_app.definitions.registry import autodiscover
        from agents_app.observability import tracing

        checks.register(check_site)
        tracing.configure()
        autodiscover()
