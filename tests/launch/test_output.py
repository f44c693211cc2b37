"""A launched run's output as people read it (launch/output.py): whole lines, last progress state, no raw ANSI,
the newest kept under a cap with a marker."""

import subprocess
import sys

import pytest

from launch.output import LineSplitter, OutputLog, clean_line


def test_a_carriage_return_progress_bar_shows_its_last_state():
    assert clean_line(" 10%|#   |\r 50%|##  |\r100%|####|") == "100%|####|"
    assert clean_line("done\r") == "done", "a trailing return leaves the line as it was"


def test_ansi_colours_cursor_moves_and_titles_are_removed_never_shown_raw():
    coloured = "\x1b[1;32mINFO\x1b[0m step 3 \x1b[2K\x1b]0;title\x07loss \x1b[31m0.5\x1b[39m\a"
    assert clean_line(coloured) == "INFO step 3 loss 0.5"
    assert clean_line("a\tb\x08c") == "a\tbc"


def test_lines_split_across_chunks_and_utf8_characters_come_out_whole():
    split = LineSplitter()
    data = "première ligne\nsecond 🚀 line\nno newline".encode()
    lines = []
    for i in range(0, len(data), 3):  # 3 bytes at a time cuts é and 🚀 in two
        lines += split.feed(data[i:i + 3])
    assert lines == ["première ligne", "second 🚀 line"]
    assert split.pending() == "no newline"
    assert split.close() == ["no newline"] and split.close() == []


def test_a_real_programs_output_reads_as_its_person_would(tmp_path):
    script = ("import sys\n"
              "for p in (10, 60, 100): print(f'\\rprogress {p}%', end='', flush=True)\n"
              "print()\nprint('\\x1b[33mwarning\\x1b[0m: slow', file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, check=True)
    out, err = LineSplitter(), LineSplitter()
    assert out.feed(proc.stdout) + out.close() == ["progress 100%"]
    assert err.feed(proc.stderr) == ["warning: slow"]


def test_past_the_cap_the_oldest_lines_go_and_a_marker_says_how_many():
    log = OutputLog(cap_bytes=100)
    for i in range(30):
        log.add("stdout", f"line {i:02d}")  # 8 characters and a newline: 9 bytes each
    assert log.bytes <= 100 and log.dropped == 30 - len(log.lines()) + 1
    lines = log.lines()
    assert lines[0] == ("yardstick", f"… {log.dropped} earlier lines dropped: the log keeps the newest "
                                     f"{100 / 2**20:g} MiB")
    assert lines[-1] == ("stdout", "line 29") and lines[1] == ("stdout", f"line {log.dropped:02d}")


def test_one_line_over_the_cap_is_kept_alone_and_the_stderr_tail_is_its_own():
    log = OutputLog(cap_bytes=10)
    log.add("stderr", "Traceback (most recent call last):")
    assert log.lines() == [("stderr", "Traceback (most recent call last):")] and log.dropped == 0
    log.add("stdout", "step 1")
    log.add("stderr", "ValueError: boom")
    assert log.tail("stderr", 1) == ["ValueError: boom"]
    with pytest.raises(ValueError, match="cap_bytes must be >= 1"):
        OutputLog(cap_bytes=0)
