"""Shared steps of the dashboard's browser tests."""

from django.contrib.auth.models import Group

PASSWORD = "a-long-password"


def user_in_role(django_user_model, username, role, subprocess=False):
    """A user holding `role`; `subprocess`: its password hashed for a server run with the real settings."""
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    user = django_user_model.objects.create_user(username, password=PASSWORD)
    if subprocess:
        # The suite hashes with MD5 for speed; a Daphne subprocess (real settings) accepts only the default.
        hasher = PBKDF2PasswordHasher()
        user.password = hasher.encode(PASSWORD, hasher.salt())
        user.save(update_fields=["password"])
    user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user


def log_in(page, base_url, username, next_path="/"):
    page.goto(base_url + next_path)
    assert "/accounts/login/" in page.url
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(base_url + next_path)


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
