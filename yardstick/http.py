"""What every app's views answer with: the JSON API's method dispatch and 400, its integer query parameters,
the HTML 400 page, and the JSON a page hands its scripts.

A JSON API error is `{"error": message}`, plus `"field"` naming the input at fault for a 400.
"""

import json

from django.core.serializers.json import DjangoJSONEncoder
from django.http import Http404, HttpResponsePermanentRedirect, JsonResponse
from django.shortcuts import render
from django.urls import Resolver404, resolve
from django.utils.safestring import mark_safe
from django.views.decorators.cache import never_cache

from yardstick.inputs import InputError

API_PREFIXES = ("api/", "ajax-api/")  # the JSON APIs answer at their own paths only


def without_trailing_slash(request, path):
    """A page asked for with a trailing slash (`/jobs/`, `/recipes/`): a permanent redirect to its one address,
    without it, with the query string (308 for a method other than GET and HEAD, which a browser must repeat as
    it was); 404 when there is no such page or the path is an API's. Page URLs have no trailing slash."""
    if path.startswith(API_PREFIXES):
        raise Http404(f"no API at /{path}/")
    try:
        resolve(f"/{path}")
    except Resolver404:
        raise Http404(f"no page at /{path}/") from None
    query = request.META.get("QUERY_STRING", "")
    resp = HttpResponsePermanentRedirect(f"/{path}" + (f"?{query}" if query else ""))
    if request.method not in ("GET", "HEAD"):
        resp.status_code = 308
    return resp


def methods(**views):
    """Return one never-cached view that calls `views[request.method]`, e.g. `methods(GET=list, POST=create)`;
    any other method gets a JSON 405 naming the allowed ones, in that message and in the Allow header."""

    @never_cache
    def dispatch(request, *args, **kwargs):
        view = views.get(request.method)
        if view is None:
            resp = JsonResponse({"error": f"method {request.method} not allowed; use {', '.join(views)}"}, status=405)
            resp["Allow"] = ", ".join(views)
            return resp
        return view(request, *args, **kwargs)

    return dispatch


def bad(field, message):
    """Return the JSON API's 400: `{"error": message, "field": field}`."""
    return JsonResponse({"error": message, "field": field}, status=400)


def bad_page(request, field, message):
    """Return the HTML 400 page (dashboard/bad_request.html) saying `message` about the input `field`."""
    return render(request, "dashboard/bad_request.html", {"message": message, "field": field}, status=400)


def int_param(request, name, default, minimum=None, maximum=None):
    """Return the integer query parameter `name`, or `default` when it is absent or empty; raise InputError
    naming it when it is not an integer within `minimum` and `maximum` (each inclusive, None for no bound)."""
    raw = request.GET.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        bounds = " and ".join(p for p in (minimum is not None and f">= {minimum}", maximum is not None and f"<= {maximum}") if p)
        raise InputError(name, f"{name} must be an integer{' ' + bounds if bounds else ''}, got {raw!r}")
    return value


# Django's json_script escapes: inside a <script> element "<!--<script>" (a job's name) switches the HTML
# parser into a state where the next "</script>" no longer ends the element, so "</" alone is not enough.
_SCRIPT_ESCAPES = {ord("<"): "\\u003C", ord(">"): "\\u003E", ord("&"): "\\u0026"}


def script_json(value):
    """Return `value` as JSON for a <script type="application/json"> block, escaped as Django's json_script
    escapes it; compact (figures are large) and still a JSON string in the context, which tests read back."""
    return script_text(json.dumps(value, cls=DjangoJSONEncoder, separators=(",", ":")))


def script_text(text):
    """JSON text made safe for a <script type="application/json"> block (as script_json escapes it)."""
    return mark_safe(text.translate(_SCRIPT_ESCAPES))
