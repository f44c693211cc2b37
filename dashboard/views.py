from django.http import JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from dashboard import health
from yardstick.auth import require_role, role_of


@never_cache
@require_GET
def healthz(request):
    """Public: the state of every part; 200 when all are fine, else 503."""
    result = health.report()
    return JsonResponse(result, status=200 if result["ok"] else 503)


@require_GET
@require_role("viewer")
def whoami(request):
    """The caller's identity and role, for scripts checking their token."""
    return JsonResponse({"username": request.user.username, "role": role_of(request.user)})


@require_GET
@require_role("viewer")
def fleet_page(request):
    return render(request, "dashboard/fleet.html", {})
