"""`GET /metrics`: the Prometheus text of this process, and the system's runs and queue."""

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

from agents_app.observability.access import token_allows
from agents_app.observability.metrics import SystemCollector
from sessions_app.auth import arequest_user
from sessions_app.http import error_body, require_methods

_system = CollectorRegistry()  # Collects at scrape time only, never at import.
_system.register(SystemCollector())


@csrf_exempt  # Only GET gets through, which CSRF never checks; a refusal would be HTML.
@never_cache
@require_methods("GET")
async def metrics(request: HttpRequest) -> HttpResponse:
    """Answer the metrics to the bearer of the metrics token or a staff user, else 401/403."""
    if not token_allows(request.headers.get("Authorization")):
        user = await arequest_user(request)
        if not user.is_authenticated:
            body = error_body("not-authenticated", "Send the metrics token or sign in as staff.")
            return JsonResponse(body, status=401)
        if not user.is_staff:
            body = error_body("permission-denied", "Metrics are for staff users.")
            return JsonResponse(body, status=403)
    text = generate_latest(REGISTRY) + await sync_to_async(generate_latest)(_system)
    return HttpResponse(text, content_type=CONTENT_TYPE_LATEST)
