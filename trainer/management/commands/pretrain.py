"""`manage.py pretrain --env NAME`: build an environment's base policy now, not on a job's first use."""

import sys
import time

from django.core.management.base import BaseCommand, CommandError

from trainer import runner


class Command(BaseCommand):
    help = "Build the base checkpoint of an environment (a short supervised warm start) under <data dir>/models."

    def add_arguments(self, parser):
        parser.add_argument("--env", required=True, help="environment name")
        parser.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")
        parser.add_argument("--force", action="store_true", help="rebuild even when a base checkpoint exists")

    def handle(self, env, device, force, **options):
        from tqdm import tqdm

        # here: trainer.rl loads torch, which only this path needs
        from trainer.rl.envs import ENV_NAMES
        from trainer.rl.pretrain import base_checkpoint_path, ensure_base_checkpoint, pretrain

        if env not in ENV_NAMES:
            raise CommandError(f"--env must be one of {', '.join(ENV_NAMES)}, got {env!r}")
        try:
            torch_device = runner.resolve_device(device)
        except (RuntimeError, ValueError) as err:
            raise CommandError(f"--device: {err}") from None
        path = base_checkpoint_path(env, runner.models_dir())
        if path.exists() and not force:
            self.stdout.write(f"{path} exists; --force rebuilds it")
            return
        started = time.perf_counter()
        with tqdm(desc=f"pretrain {env}", unit="step", file=sys.stderr, disable=None) as bar:
            def progress(step, max_steps, info):
                bar.total = max_steps
                bar.update(step - bar.n)
                bar.set_postfix({k: round(v, 3) for k, v in info.items() if k in ("loss", "pass1")}, refresh=False)

            build = pretrain if force else ensure_base_checkpoint
            path = build(env, runner.models_dir(), torch_device, progress=progress)
        self.stdout.write(f"base checkpoint for {env}: {path} ({time.perf_counter() - started:.0f} s)")
