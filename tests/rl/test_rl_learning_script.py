"""bench/learning.py, the command that prints an eval curve, runs end to end on a tiny base."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_learning_script_prints_a_baseline_and_a_final_score(tiny_base_dir):
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "learning.py"), "--env", "toolcalc", "--steps", "2",
         "--base-dir", str(tiny_base_dir), "--set", "prompts_per_step=2", "--set", "group_size=2",
         "--set", "eval_size=8", "--set", "eval_every=1", "--set", "max_new_tokens=16"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert "step    0  eval pass@1" in out.stdout
    assert "step    2  eval pass@1" in out.stdout
    assert "toolcalc: baseline" in out.stdout and "in 2 steps" in out.stdout
