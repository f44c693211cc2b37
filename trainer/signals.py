"""What the trainer tells apps above it, without importing them.

`run_ended` is sent by the worker after a job it ran has ended (completed, stopped, failed or
budget_exhausted) and its final status is committed; `job` is the Job. Receivers run in the
worker's process (campaigns evaluates retention and starts a loop's next run there); an error in
one is logged, never raised into the run.
"""

from django.dispatch import Signal

run_ended = Signal()
devices_freed = Signal()
