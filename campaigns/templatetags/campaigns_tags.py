from django import template

register = template.Library()


@register.simple_tag
def env_names():
    """The environments a Continue or a campaign may pick (trainer.rl.envs.ENV_NAMES)."""
    # here: trainer.rl loads torch, which only this path needs
    from trainer.rl.envs import ENV_NAMES

    return ENV_NAMES


@register.filter
def campaign_of(job):
    """The campaign `job` is a run of, or None (one query; a list prefetches campaign_run__campaign)."""
    run = getattr(job, "campaign_run", None)  # a job in no campaign raises DoesNotExist, which getattr absorbs
    return run.campaign if run is not None else None
