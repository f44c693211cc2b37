"""GET /metrics: the Prometheus exposition of exporter.metrics, for the scrape token or a viewer."""

from django.http import HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from exporter import metrics
from yardstick.auth import has_role


@require_GET
def metrics_view(request):
    """The metrics, for Prometheus sending settings.METRICS_TOKEN (yardstick.auth marks the request
    `metrics_scrape`) or a user with the viewer role (an API token or a session); 403 for anyone else
    (the login middleware has answered 401 to a request without credentials)."""
    if not getattr(request, "metrics_scrape", False) and not has_role(request.user, "viewer"):
        return JsonResponse({"error": "this needs the viewer role or the scrape token (YARDSTICK_METRICS_TOKEN)"},
                            status=403)
    return HttpResponse(metrics.render(), content_type=metrics.CONTENT_TYPE)
