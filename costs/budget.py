"""Budget stops: a job whose cost reaches its budget_usd is asked to stop as budget_exhausted.

Run right after attribution (costs.tasks.attribute), so a job overruns its
budget by at most the minutes attribution is behind plus one training step
(the trainer ends the job at its next step boundary).
"""

import logging
from decimal import ROUND_HALF_UP, Decimal

from costs.ledger import job_costs

log = logging.getLogger(__name__)


def check_budgets(book=None):
    """Request a budget stop for every active job whose cost so far >= its budget; return their ids."""
    from trainer.models import ACTIVE, Job

    jobs = {j.pk: j for j in Job.objects.filter(status__in=ACTIVE, budget_usd__isnull=False,
                                                 budget_stop_requested=False)}
    if not jobs:
        return []
    stopped = []
    for job_id, cost in sorted(job_costs(list(jobs), book=book).items()):
        job = jobs[job_id]
        if cost >= job.budget_usd:
            spent = cost.quantize(Decimal("0.01"), ROUND_HALF_UP)
            if job.request_budget_stop(reason=f"spend ${spent} reached the budget ${job.budget_usd}"):
                log.info("job %s: spend $%s reached its budget $%s; stop requested", job_id, spent, job.budget_usd)
                stopped.append(job_id)
    return stopped
