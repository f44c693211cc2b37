"""`manage.py pretrain --env NAME`: build a base policy explicitly."""

import pytest
from django.core.management import CommandError, call_command


def test_an_unknown_environment_is_refused_naming_the_known_ones(data_dir):
    with pytest.raises(CommandError, match=r"--env must be one of arithmetic, toolcalc, got 'chess'"):
        call_command("pretrain", "--env", "chess")


def test_an_existing_base_is_kept_unless_forced(data_dir, capsys):
    before = (data_dir / "models" / "base-arithmetic.pt").stat().st_mtime_ns
    call_command("pretrain", "--env", "arithmetic")
    assert "exists; --force rebuilds it" in capsys.readouterr().out
    assert (data_dir / "models" / "base-arithmetic.pt").stat().st_mtime_ns == before


def test_a_missing_gpu_is_refused(data_dir):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(CommandError, match=r"--device: device cuda was requested but .* has 0 CUDA device"):
        call_command("pretrain", "--env", "arithmetic", "--device", "cuda")
