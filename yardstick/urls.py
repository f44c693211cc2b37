from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path, re_path
from django.views.generic import RedirectView

from yardstick.auth import has_role
from yardstick.http import without_trailing_slash

# The Django admin is for the admin role (prices, nodes, users), not for is_staff.
admin.site.has_permission = lambda request: request.user.is_active and has_role(request.user, "admin")
admin.site.site_header = "Yardstick administration"

urlpatterns = [
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    # Pages name the SVG icon in base.html; this answers tools that ask the conventional path anyway.
    path("favicon.ico", RedirectView.as_view(url=static("yardstick/favicon.svg"), permanent=True)),
    # The MLflow-compatible tracking API first: its catch-all answers MLflow paths in MLflow's JSON.
    path("", include("tracking.urls")),
    path("", include("launch.urls")),
    path("", include("dashboard.urls")),
    path("", include("collector.urls")),
    path("", include("trainer.urls")),
    path("", include("costs.urls")),
    path("", include("campaigns.urls")),
    path("", include("sweeps.urls")),
    path("", include("serving.urls")),
    path("", include("alerts.urls")),
    path("", include("exporter.urls")),
    # One URL style: pages have no trailing slash, and one asked for with it is sent to its address.
    re_path(r"^(?P<path>.+)/$", without_trailing_slash),
]
