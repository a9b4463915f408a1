"""`GET /healthz` and `GET /readyz`: public, never cached, GET and HEAD only.

`/healthz` answers as long as the process serves requests, touching nothing else. `/readyz`
answers 200 with each check's result (`agents_app.health.checks`) when all pass, else 503 in
the error shape, `not-ready`, naming the failed checks and why.
"""

from typing import Any

from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt

from agents_app.health.checks import CheckResult, readiness
from sessions_app.conf import helix_setting
from sessions_app.http import error_body, require_methods


@csrf_exempt  # Only GET and HEAD get through; CSRF would answer others with an HTML page.
@never_cache
@require_methods("GET", "HEAD")
async def healthz(request: HttpRequest) -> JsonResponse:
    """Answer that the process is up."""
    return JsonResponse({"status": "ok"})


@csrf_exempt
@never_cache
@require_methods("GET", "HEAD")
async def readyz(request: HttpRequest) -> JsonResponse:
    """Answer whether every dependency is ready, each check within the readiness timeout."""
    results = await readiness(timeout=float(helix_setting("READINESS_TIMEOUT_SECONDS", 2.0)))
    checks = {result.name: _check_output(result) for result in results}
    failed = [result.name for result in results if not result.ok]
    if not failed:
        return JsonResponse({"status": "ready", "checks": checks})
    body = error_body(
        "not-ready", f"Not ready: {', '.join(failed)}.", {"failed": failed, "checks": checks}
    )
    return JsonResponse(body, status=503)


def _check_output(result: CheckResult) -> dict[str, Any]:
    output: dict[str, Any] = {"ok": result.ok, "ms": round(result.seconds * 1000, 1)}
    if result.error is not None:
        output["error"] = result.error
    return output
