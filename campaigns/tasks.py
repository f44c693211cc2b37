"""Celery entry points for campaigns: thin wrappers around campaigns.models."""

from celery import shared_task

from campaigns.models import Campaign


# Sent to the "jobs" queue (Campaign.create): it loads a policy and evaluates it, like a job does.
@shared_task(name="campaigns.tasks.evaluate_start", ignore_result=True)
def evaluate_start(campaign_id):
    """Evaluate campaign `campaign_id`'s starting policy on every environment it cares about."""
    campaign = Campaign.objects.filter(pk=campaign_id).first()
    if campaign is not None:
        campaign.evaluate_retention(after=None)


@shared_task(name="campaigns.tasks.join_tagged_runs", ignore_result=True)
def join_tagged_runs():
    """External runs tagged yardstick.campaign join their campaign (also done when a campaign is read)."""
    return Campaign.join_tagged_runs()
