"""Budget stops: a job whose cost reaches its budget_usd is asked to stop as budget_exhausted.

Run right after attribution (costs.tasks.attribute), so a job overruns its
budget by at most the minutes attribution is behind plus one training step
(the trainer ends the job at its next step boundary).
"""

import logging

from costs.ledger import job_costs
from costs.money import exact_usd, usd_text
from trainer.models import ACTIVE, Job

log = logging.getLogger(__name__)


def check_budgets(book=None):
    """Request a budget stop for every active job whose cost so far >= its budget; return their ids."""
    jobs = {j.pk: j for j in Job.objects.filter(status__in=ACTIVE, budget_usd__isnull=False,
                                                 budget_stop_requested=False)}
    if not jobs:
        return []
    stopped = []
    for job_id, cost in sorted(job_costs(list(jobs), book=book).items()):
        job = jobs[job_id]
        # Unrounded cost against the budget (kept to the micro-dollar): a $0.001 budget is not spent by
        # $0.0004 rounded to "$0.00" or "$0.01". The reason shows both as the pages do.
        if cost >= job.budget_usd:
            spent, budget = usd_text(cost), usd_text(job.budget_usd)
            if job.request_budget_stop(reason=f"spend {spent} reached the budget {budget}"):
                log.info("job %s: spend $%s reached its budget $%s; stop requested", job_id, exact_usd(cost),
                         exact_usd(job.budget_usd))
                stopped.append(job_id)
    return stopped
