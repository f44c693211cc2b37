"""A URLconf for tests/platform/test_web_process.py: one view that takes a while and counts who runs beside it."""

import threading
import time

from django.http import JsonResponse
from django.urls import path

running = {"now": 0, "most": 0}
_lock = threading.Lock()


def slow(request):
    with _lock:
        running["now"] += 1
        running["most"] = max(running["most"], running["now"])
    time.sleep(0.3)
    with _lock:
        running["now"] -= 1
    return JsonResponse({"user": request.user.username})


urlpatterns = [path("slow", slow)]
