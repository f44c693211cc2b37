import os

import django
from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "yardstick.settings")
# Before any connection: this process's connections come from a pool (settings.WEB_DB_POOL says why), each
# checked before a request gets it (PostgreSQL may have restarted since it was opened).
settings.DATABASES["default"]["OPTIONS"]["pool"] = settings.WEB_DB_POOL
settings.DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
django.setup(set_prefix=False)  # as get_asgi_application does, before the imports below

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from dashboard.routing import websocket_urlpatterns  # noqa: E402
from yardstick.web import OneThreadASGIHandler  # noqa: E402

django_app = OneThreadASGIHandler()  # Django's ASGI handler, each request's middleware and view in one thread

application = ProtocolTypeRouter(
    {
        "http": django_app,
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
