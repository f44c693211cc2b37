from django import template

register = template.Library()


@register.filter
def trial_of(job):
    """The sweep trial `job` is, or None (one query; a list selects sweep_trial__sweep)."""
    return getattr(job, "sweep_trial", None)  # a job of no sweep raises DoesNotExist, which getattr absorbs
