"""Shared steps of the dashboard's browser tests."""

from django.conf import settings
from django.contrib.auth.models import Group

PASSWORD = "a-long-password"


def user_in_role(django_user_model, username, role, subprocess=False):
    """A user holding `role`; `subprocess`: its password hashed for a server run with the real settings."""
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    user = django_user_model.objects.create_user(username, password=PASSWORD)
    if subprocess:
        # The suite hashes with MD5 for speed; a Daphne subprocess (real settings) accepts only PBKDF2. A thousand
        # rounds, not the million the real settings hash with (a second of CPU here and another in Daphne): a login
        # through the form there checks these, then hashes the password again with the settings' rounds.
        hasher = PBKDF2PasswordHasher()
        user.password = hasher.encode(PASSWORD, hasher.salt(), iterations=1000)
        user.save(update_fields=["password"])
    user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user


def log_in(page, base_url, username, next_path="/"):
    """`username`, logged in, opens `next_path`: with a session made here, as the test client's force_login makes
    one. The login form itself, and the return to the page asked for, are walked in
    tests/platform/test_login_browser.py; every page sending an anonymous visitor there, in test_permissions.py."""
    page.context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": session_of(username), "url": base_url}])
    page.goto(base_url + next_path)
    page.wait_for_url(base_url + next_path)


def session_of(username):
    """The key of a new session in which `username` is logged in."""
    from importlib import import_module

    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model

    user = get_user_model().objects.get(username=username)
    session = import_module(settings.SESSION_ENGINE).SessionStore()
    session[SESSION_KEY] = user._meta.pk.value_to_string(user)
    session[BACKEND_SESSION_KEY] = settings.AUTHENTICATION_BACKENDS[0]
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()
    return session.session_key


def shot(page, output_dir, request, suffix):
    """A screenshot mid-test; live updates pause meanwhile (a chart redrawn under the camera stalls it)."""
    live = page.evaluate("!!(window.Yardstick && document.getElementById('live-toggle')?.getAttribute('aria-pressed') === 'true')")
    if live:
        page.evaluate("window.Yardstick.setLive(false)")
    page.screenshot(path=str(output_dir / f"{request.node.name}-{suffix}.png"), full_page=True, timeout=60_000)
    if live:
        page.evaluate("window.Yardstick.setLive(true)")


def record_events(page):
    """Keep every live event the page handles in window.__events (from the next navigation on)."""
    page.add_init_script("window.__events = []; document.addEventListener('yardstick:event', "
                         "function (e) { window.__events.push(e.detail); });")


def wait_subscribed(page, times=1):
    """Until the page's socket has been told its topics `times` times: its groups are joined by then."""
    page.wait_for_function(f"(window.__events || []).filter(e => e.kind === 'subscribed').length >= {times}")


def in_thread(fn, *args):
    """Call fn(*args) in a thread of its own and return its result.

    Playwright's sync API keeps an event loop in the test's thread, where async_to_sync (the channel
    layer's send) refuses to run; the thread also gets its own database connection, closed after.
    """
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    def call():
        try:
            return fn(*args)
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(call).result()
