"""Several web processes behind one address, as `up --web-processes N` runs them: each accepts on the one
listening socket it inherits, so connections spread over them, and the fleet's viewers on either get the one
publisher's frames."""

import http.client
import re

import pytest

from tests.browser import page  # noqa: F401 - fixture
from tests.dashboard import builders as b
from tests.dashboard.browser_helpers import log_in, user_in_role

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_children_for_gives_each_web_process_the_shared_socket(settings):
    from yardstick.runner import ROLES, children_for

    children = children_for(settings, ROLES, "127.0.0.1", 8000, web_processes=3, listen_fd=7)
    webs = [c for c in children if c.name.startswith("web")]
    assert [c.name for c in webs] == ["web1", "web2", "web3"]
    assert all(c.pass_fds == (7,) and c.argv[c.argv.index("--fd") + 1] == "7" and "-p" not in c.argv for c in webs)
    assert [c.name for c in children_for(settings, ROLES, "127.0.0.1", 8000)][:1] == ["web"]


def test_two_web_processes_share_one_address_and_both_serve_the_live_fleet(tmp_path, page, django_user_model):  # noqa: F811
    from tests.dashboard.live_stack import LiveStack

    gpu = b.device(b.node("gpu-a", interval_s=30), 0)
    b.latest(gpu, 40, 300)
    stack = LiveStack(tmp_path, worker=False, web_processes=2).start()
    try:
        # New connections land on both processes: each has its own access log lines. (The login page: /healthz
        # waits a second for a Celery worker's answer, and this stack has none.)
        for _ in range(60):
            conn = http.client.HTTPConnection("127.0.0.1", stack.port, timeout=10)
            conn.request("GET", "/accounts/login/")
            conn.getresponse().read()
            conn.close()
        served = [len(re.findall(r'"GET /accounts/login/', stack.log(f"daphne{i}").read_text())) for i in (1, 2)]
        assert sum(served) >= 60 and min(served) > 0, served

        # A viewer's page goes live and draws the fleet's frames, whichever process holds its socket.
        user_in_role(django_user_model, "wren", "viewer", subprocess=True)
        log_in(page, stack.url, "wren", "/")
        page.wait_for_function("document.getElementById('live-state').dataset.state === 'live'")
        b.latest(gpu, 77, 500)
        page.wait_for_function("document.querySelector('#node-table tr[data-node=\"gpu-a\"] .node-util')"
                               ".textContent === '77%'", timeout=15_000)
        publishers = [i for i in (1, 2) if "this process publishes" in stack.log(f"daphne{i}").read_text()]
        assert len(publishers) == 1, publishers
    finally:
        stack.stop()
