"""Who may see and do what: roles, API tokens, and the login wall.

Three roles, each a Django group created by a migration, each including the
one before: `viewer` reads, `operator` also starts and stops jobs, `admin` also
edits prices, nodes and users. A superuser is an admin.

Beside them, the narrow `reporter` role is for the tokens training runs report
with (MLFLOW_TRACKING_TOKEN): it may call the MLflow tracking and artifact APIs
(TRACKING_PREFIXES) and nothing else; every page and other API answers 403.
Operators and admins may write runs too; viewers may read them.
"""

import functools
import hmac

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.http import JsonResponse
from django.shortcuts import redirect, render

from yardstick.models import ApiToken

ROLES = ("viewer", "operator", "admin")
REPORTER = "reporter"
# Who may write runs through the tracking API (create, log, update); viewers may only read.
TRACKING_WRITERS = (REPORTER, "operator", "admin")

# The MLflow-compatible APIs (tracking/): the only paths a reporter may reach; errors there in MLflow's shape.
TRACKING_PREFIXES = ("/api/2.0/mlflow/", "/api/2.0/mlflow-artifacts/", "/api/3.0/mlflow/", "/ajax-api/")

# The Prometheus endpoint (exporter/): beside API tokens it takes settings.METRICS_TOKEN, a scrape token
# that is no user's and opens nothing else.
METRICS_PATH = "/metrics"

# Paths anyone may open: the health check, the login page, static files.
PUBLIC_PREFIXES = ("/healthz", "/accounts/login/", "/static/")


def role_of(user):
    """Return the highest role the user holds ("viewer", "operator", "admin"), or None."""
    if not user or not user.is_authenticated or not user.is_active:
        return None
    if user.is_superuser:
        return "admin"
    cached = getattr(user, "_yardstick_role", False)
    if cached is not False:
        return cached
    names = _group_names(user)
    role = next((r for r in reversed(ROLES) if r in names), REPORTER if REPORTER in names else None)
    user._yardstick_role = role
    return role


@functools.cache
def _group_names_sql(user_model):
    """SELECT the names of a user's groups, from the models' own tables and columns (user.groups)."""
    qn = connection.ops.quote_name
    through = user_model.groups.through
    group = user_model.groups.field.related_model
    return (f"SELECT g.{qn(group._meta.get_field('name').column)} FROM {qn(group._meta.db_table)} g "
            f"JOIN {qn(through._meta.db_table)} m ON m.{qn(through._meta.get_field('group').column)} = "
            f"g.{qn(group._meta.pk.column)} WHERE m.{qn(through._meta.get_field('user').column)} = %s")


def _group_names(user):
    """The names of the user's groups: what user.groups.values_list("name") reads, without building the
    query each time (a login-walled request asks once; the ORM took 1.3 ms of CPU a request, this 0.3)."""
    with connection.cursor() as cur:
        cur.execute(_group_names_sql(get_user_model()), [user.pk])
        return {name for (name,) in cur.fetchall()}


def has_role(user, role):
    """Whether the user holds `role` of ROLES or a higher one (a reporter holds none of them)."""
    held = role_of(user)
    return held in ROLES and ROLES.index(held) >= ROLES.index(role)


def is_api(request):
    return request.path.startswith("/api/") or request.path == METRICS_PATH


def is_metrics_scrape(request, token):
    """Whether `token` is settings.METRICS_TOKEN sent to METRICS_PATH (never when no scrape token is set)."""
    return (request.path == METRICS_PATH and bool(settings.METRICS_TOKEN)
            and hmac.compare_digest(token.encode(), settings.METRICS_TOKEN.encode()))


def is_tracking(request):
    return request.path.startswith(TRACKING_PREFIXES)


def _unauthenticated(request, message):
    if is_tracking(request):  # the MLflow client reads error_code and message
        return JsonResponse({"error_code": "UNAUTHENTICATED", "message": message}, status=401)
    return JsonResponse({"error": message}, status=401)


def _denied(request, status, message):
    if is_api(request):
        return JsonResponse({"error": message}, status=status)
    return render(request, "denied.html", {"message": message}, status=status)


def require_role(role):
    """Decorate a view so only users holding `role` (or a higher one) reach it.

    Anonymous: 401 JSON on /api/, a redirect to the login page elsewhere.
    Logged in without the role: 403 naming the role needed.
    """
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")

    def decorate(view):
        @functools.wraps(view)
        def wrapped(request, *args, **kwargs):
            if not request.user.is_authenticated:
                if is_api(request):
                    return JsonResponse({"error": "authentication required"}, status=401)
                return redirect(f"{settings.LOGIN_URL_PATH}?next={request.get_full_path()}")
            if not has_role(request.user, role):
                return _denied(request, 403, f"this needs the {role} role")
            return view(request, *args, **kwargs)

        wrapped.required_role = role
        return wrapped

    return decorate


class TokenAuthMiddleware:
    """Log in a script that sends `Authorization: Bearer <token>`.

    A request authenticated by token carries no session cookie, so CSRF (which
    protects cookie-borne sessions) does not apply to it. A bad token is a 401,
    never a silent fall-back to anonymous.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        header = request.headers.get("Authorization", "")
        if header:
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                return _unauthenticated(request, "Authorization must be 'Bearer <token>'")
            if is_metrics_scrape(request, token.strip()):
                request.metrics_scrape = True  # no user: exporter.views serves it /metrics, and nothing else does
                request._dont_enforce_csrf_checks = True
                return self.get_response(request)
            row = ApiToken.find(token.strip())
            if row is None:
                return _unauthenticated(request, "invalid or revoked API token")
            request.user = row.user
            # A launched run's token: tracking.api.check_role lets it write this run and nothing else.
            request.token_run_id = row.run_id
            request._dont_enforce_csrf_checks = True
        return self.get_response(request)


class LoginRequiredMiddleware:
    """Every page and API endpoint needs a logged-in user, except PUBLIC_PREFIXES."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path.startswith(PUBLIC_PREFIXES) or getattr(request, "metrics_scrape", False):
            return self.get_response(request)
        if request.user.is_authenticated:
            if getattr(request, "token_run_id", "") and not is_tracking(request):
                return _denied(request, 403, "a launched run's token may only report its own run (the MLflow "
                                             "tracking API under /api/2.0/mlflow/)")
            if role_of(request.user) == REPORTER and not is_tracking(request):
                return _denied(request, 403, "a reporter token may only report training runs (the MLflow "
                                             "tracking API under /api/2.0/mlflow/); this needs the viewer role")
            return self.get_response(request)
        if is_api(request) or is_tracking(request):
            return _unauthenticated(request, "authentication required: send 'Authorization: Bearer <token>' "
                                             "(MLFLOW_TRACKING_TOKEN)" if is_tracking(request)
                                    else "authentication required")
        return redirect(f"{settings.LOGIN_URL_PATH}?next={request.get_full_path()}")


def role_context(request):
    user = getattr(request, "user", None)
    role = role_of(user)
    return {
        "role": role,
        "can_operate": role in ("operator", "admin"),
        "is_admin_role": role == "admin",
    }


def create_token(username, name="cli"):
    """Create an API token for `username`; return (token, ApiToken). The token is shown once."""
    user = get_user_model().objects.get(username=username)
    return ApiToken.issue(user, name)


class RoleBackend:
    """Grant every model permission to users holding the admin role.

    Roles are groups; rather than copying every permission into the admin
    group (and again for each new model), an admin-role user simply has them.
    Used beside Django's ModelBackend, which still checks passwords.
    """

    def authenticate(self, request, **credentials):
        return None

    def get_user(self, user_id):
        return None

    def has_perm(self, user_obj, perm, obj=None):
        return has_role(user_obj, "admin")

    def has_module_perms(self, user_obj, app_label):
        return has_role(user_obj, "admin")
