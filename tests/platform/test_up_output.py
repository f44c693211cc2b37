"""What `manage.py up` prints and what it keeps in files: each part's whole output in its rotated log
under the data dir, on the terminal what a person needs (starts, stops, warnings, errors, jobs).

The line rules and the rotation are checked here on their own, and the runner on a real child
process that writes like a Celery worker; a real `up` (its terminal under 40 lines, the URL and
the login last, the chatter in the files, `--verbose`) is walked in test_up.py.
"""

import io
import logging
import signal
import sys
import threading
import time

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpResponse
from django.test import RequestFactory
from django.urls import resolve
from django.utils.log import log_response

from tests.waiting import wait_for
from yardstick.env import envchoice
from yardstick.logs import PartLog, RecordsForPeople
from yardstick.runner import Child, Runner

OWN = {"trainer", "collector", "yardstick"}


def shown(lines, level="WARNING"):
    shows = RecordsForPeople(level, OWN)
    return [line for line in lines if shows(line)]


# What parts write, each with whether the terminal shows it by default (YARDSTICK_LOG_LEVEL=WARNING).
LINES = [
    (" -------------- default@vm v5.7.0 (collider)", False),  # Celery's banner, before any record
    ("INFO celery.worker.strategy: Task yardstick.tasks.beat_tick[e486] received", False),
    ("INFO celery.app.trace: Task yardstick.tasks.beat_tick[e486] succeeded in 0.0087s: {'jobs': 0}", False),
    ("INFO celery.beat: Scheduler: Sending due task beat-tick (yardstick.tasks.beat_tick)", False),
    ("INFO trainer.runner: job 3 (demo) started on vm, device cpu", True),
    ("WARNING celery.worker.consumer.consumer: consumer: Cannot connect to redis: Connection refused.", True),
    ("ERROR trainer.runner: job 3 failed", True),
    ("Traceback (most recent call last):", True),
    ('  File "trainer/runner.py", line 1, in run', True),
    ("ValueError: boom", True),
    ("INFO daphne.server: Listening on TCP address 127.0.0.1:8000", False),
    ("  a second line of that INFO record", False),
    ("2026-12-01 21:55:47,058 INFO collecting from host every 1s; spool var/collector-spool", True),
    ("2026-12-01 21:55:48,000 WARNING database unreachable; spooling", True),
    ("/venv/celery/platforms.py:893: SecurityWarning: You're running the worker with superuser privileges", True),
    ("absolutely not recommended!", True),
]
WRITTEN = [line for line, _ in LINES]


def test_the_terminal_gets_warnings_errors_and_yardsticks_own_events_but_not_per_task_lines():
    assert shown(WRITTEN) == [line for line, for_people in LINES if for_people]
    # YARDSTICK_LOG_LEVEL=INFO: every INFO record, Celery's per-task lines too; banners stay in the file.
    assert shown(WRITTEN, "INFO") == WRITTEN[1:]
    # ERROR: Yardstick's own INFO events still, warnings of libraries no more.
    assert "INFO trainer.runner: job 3 (demo) started on vm, device cpu" in shown(WRITTEN, "ERROR")
    assert not [line for line in shown(WRITTEN, "ERROR") if line.startswith("WARNING celery")]


def test_an_uncaught_traceback_is_shown_even_after_a_hidden_record():
    assert shown(["INFO celery.app.trace: Task x[1] succeeded in 0.01s: None",
                  "Traceback (most recent call last):", "RuntimeError: died"]) == [
        "Traceback (most recent call last):", "RuntimeError: died"]


def test_the_terminal_level_is_a_level_name_in_any_case_and_a_typo_stops_start_up():
    levels = ("DEBUG", "INFO", "WARNING", "ERROR")
    assert envchoice("YARDSTICK_LOG_LEVEL", levels, "WARNING", environ={}) == "WARNING"
    assert envchoice("YARDSTICK_LOG_LEVEL", levels, "WARNING", environ={"YARDSTICK_LOG_LEVEL": " info "}) == "INFO"
    with pytest.raises(ImproperlyConfigured,
                       match=r"^YARDSTICK_LOG_LEVEL must be one of DEBUG, INFO, WARNING, ERROR, got 'loud'$"):
        envchoice("YARDSTICK_LOG_LEVEL", levels, "WARNING", environ={"YARDSTICK_LOG_LEVEL": "loud"})


def test_a_part_log_rotates_past_its_size_keeping_its_backups(tmp_path):
    log = PartLog(tmp_path / "log" / "worker.log", max_bytes=400, backups=2)
    for n in range(40):
        log.write(f"line {n:02d}: 100% of %s kept as written")
    log.close()

    files = sorted(p.name for p in (tmp_path / "log").iterdir())
    assert files == ["worker.log", "worker.log.1", "worker.log.2"]
    newest = (tmp_path / "log" / "worker.log").read_text().splitlines()
    assert newest[-1].endswith(" line 39: 100% of %s kept as written")
    assert all(p.stat().st_size <= 400 for p in (tmp_path / "log").iterdir())
    # Each line starts with when it was written.
    assert time.strftime("%Y-%m-%d") in newest[-1].split(" ")[0]


def test_a_healthz_503_is_an_info_record_and_any_other_503_an_error(caplog):
    def log_503(path):
        request = RequestFactory().get(path)
        request.resolver_match = resolve(path)
        with caplog.at_level(logging.INFO, logger="django.request"):
            log_response("Service Unavailable: %s", path, response=HttpResponse(status=503), request=request)
        return caplog.records[-1].levelname

    assert log_503("/healthz") == "INFO"
    assert log_503("/api/whoami") == "ERROR"


def test_a_part_that_exits_by_itself_has_its_last_lines_printed_and_every_line_in_its_file(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    out = io.StringIO()
    runner = Runner(settings, "127.0.0.1", 1, out=out, roles=("collector",))
    # Writes as a Celery worker does: its banner on stdout, its log records on stderr.
    script = (
        "import sys\n"
        "print(' -------------- demo@vm v5.7.0')\n"
        "sys.stderr.write('INFO trainer.runner: job 7 (demo) started on vm, device cpu\\n')\n"
        "sys.stderr.write('INFO celery.app.trace: Task t[1] succeeded in 0.01s: None\\n')\n"
        "sys.stderr.write('CommandError: the broker refused the login\\n')\n"
        "sys.exit(3)\n"
    )
    child = Child("demo", [sys.executable, "-c", script])
    runner.children = [child]
    runner.start_child(child)
    wait_for(lambda: child.process.poll() is not None, 30, "the child to exit")
    runner.check_children()
    for reader in child.readers:
        reader.join(5)

    terminal = out.getvalue().splitlines()
    assert terminal[0].startswith("       up | started demo (pid ")
    assert "     demo | INFO trainer.runner: job 7 (demo) started on vm, device cpu" in terminal
    assert "       up | demo exited with code 3; restarting in 1 s" in terminal
    # Why it ended is among the lines the terminal had kept off; they follow the exit.
    tail = terminal[terminal.index("       up | demo exited with code 3; restarting in 1 s") + 1:]
    assert tail[0] == f"       up | the last lines of demo (all of them in {tmp_path / 'log' / 'demo.log'}):"
    assert "     demo | CommandError: the broker refused the login" in tail
    assert not any("succeeded" in line for line in terminal[:terminal.index(tail[0])])

    kept = (tmp_path / "log" / "demo.log").read_text()
    for text in ("-------------- demo@vm", "Task t[1] succeeded", "job 7 (demo) started", "CommandError"):
        assert text in kept


def test_a_stop_signal_that_comes_while_the_runner_holds_its_stop_events_lock_still_stops_it(settings, tmp_path):
    # Ctrl-C runs its handler in the main thread between two of its steps, perhaps inside Event.wait while it holds
    # the event's lock: a handler that set the event there waited for that lock for ever (`up` hung, every part
    # left running). The handler is called here exactly so: with the lock held by this thread.
    settings.DATA_DIR = tmp_path
    runner = Runner(settings, "127.0.0.1", 1, out=io.StringIO(), roles=("collector",))
    handled = threading.Event()

    def signal_arrives():
        with runner.stopping._cond:  # what Event.wait holds on its way out
            runner.on_signal(signal.SIGINT, None)
            handled.set()

    thread = threading.Thread(target=signal_arrives, daemon=True)
    thread.start()
    assert handled.wait(5), "the handler returned while the event's lock was held"
    assert runner.stopping.wait(5), "and the runner is told to stop once the lock is free"
