"""A transformers `TrainerCallback` (TRL's trainers are transformers Trainers) for Stop.

After each optimizer step it asks Yardstick (rate-limited, see stop.py) whether
the run is to stop; if so the Trainer stops after that step, and when training
ends the run ends KILLED. transformers' own MLflowCallback, placed before user
callbacks, ends the run it started FINISHED in its on_train_end first; the
run is then set KILLED, so the run's last status is the truth.
"""

from transformers import TrainerCallback

from .stop import _active_run_id, end_killed, should_stop


class StopCallback(TrainerCallback):
    def __init__(self):
        self.stopped_run_id = None

    def on_step_end(self, args, state, control, **kwargs):
        if self.stopped_run_id is not None:
            return control
        run_id = _active_run_id() if state.is_world_process_zero else None
        stop = _same_on_every_rank(run_id is not None and should_stop(run_id), args)
        if stop:
            self.stopped_run_id = run_id or ""
            control.should_training_stop = True
            control.should_log = True  # the last step's metrics reach the run before it ends
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if self.stopped_run_id and state.is_world_process_zero:
            end_killed(self.stopped_run_id)
        return control


def _same_on_every_rank(stop, args):
    """Rank 0's answer on every rank: only rank 0 holds the MLflow run, and a rank
    that stopped alone would leave the others waiting in their next collective.
    One one-element broadcast per step when training is distributed."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return stop
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return stop
    flag = torch.tensor([1 if stop else 0], device=args.device)
    dist.broadcast(flag, src=0)
    return bool(flag.item())
