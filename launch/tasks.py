"""Celery entry points for launched jobs: thin wrappers around launch.executor and launch.kind."""

import logging

from celery import shared_task
from django.conf import settings

from launch import executor, remote
from launch.kind import QUEUE_PREFIX, RUN_LAUNCH, match_other_nodes, requeue_orphans, revoke_ended_tokens

log = logging.getLogger(__name__)


# Sent to the chosen launch worker's own queue (launch@<node>): the worker whose free devices the placement gave
# the job. Acknowledged when done; the claim (queued → running) makes a redelivery a no-op.
@shared_task(name=RUN_LAUNCH, acks_late=True, ignore_result=True)
def run_launch(job_id):
    """Run launched job `job_id` on this node to its end (when it is still placed on this worker)."""
    executor.run(job_id, worker=f"{QUEUE_PREFIX}{settings.YARDSTICK_NODE}")  # this node's launch worker


@shared_task(name="launch.tasks.revoke_ended_tokens", ignore_result=True)
def revoke_tokens():
    """Revoke the run tokens of launched jobs that ended without their worker revoking them (it died), and put the
    queued ones whose worker went away before starting them back in the line."""
    for job in requeue_orphans():
        log.warning("launched job %s is back in the line: its launch worker stopped reporting", job.pk)
    revoked = revoke_ended_tokens()
    if revoked:
        log.info("revoked %s tracking token(s) of ended launched jobs", revoked)
    return revoked


@shared_task(name="launch.tasks.match_other_nodes", ignore_result=True)
def match_launched_runs():
    """Charge launched jobs for the GPUs their processes hold on other nodes (found by YARDSTICK_JOB_ID)."""
    return match_other_nodes()


# Sent after a launch on a cluster (to submit it at once) and by beat every settings.LAUNCH_FOLLOW_S for them all;
# the row lock each pass takes makes two at once harmless.
@shared_task(name=remote.FOLLOW, ignore_result=True)
def follow_remote(job_id):
    """One follower pass over launched job `job_id` on its cluster (submits it when queued)."""
    remote.follow(job_id)


@shared_task(name="launch.tasks.follow_clusters", ignore_result=True)
def follow_clusters():
    """One follower pass over every live job launched on a cluster."""
    return remote.follow_all()
