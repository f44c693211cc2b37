"""Parsing and validating what a person asks of a job: each function returns the clean value or raises
InputError naming the field, the value and what would be accepted.

Job.start and Campaign.create read their input through these, so a field means the same and is
refused in the same words wherever it is given.
"""

import re
from decimal import Decimal, InvalidOperation

from trainer.models import BUDGET_PLACES, Job, Priority, Status
from yardstick.auth import has_role
from yardstick.inputs import InputError

DEVICE_RE = re.compile(r"^(auto|cpu|cuda|cuda:\d{1,2})$")
DEVICE_ACCEPTED = "auto, cpu, cuda or cuda:N"
BUDGET_MAX_USD = Decimal("9999999999.999999")  # what DecimalField(16, 6) holds
DEVICES_MAX = 64


def status_filter(value):
    """A ?status= filter: None (all jobs) when empty, else one of Status; InputError naming the accepted ones."""
    if not value:
        return None
    if value not in Status.values:
        raise InputError("status", f"status must be one of {', '.join(Status.values)}, or empty for all jobs; "
                                      f"got {value!r}")
    return value


def env_names():
    """The environments a job may train on (trainer.rl.envs), imported only when asked: it loads torch."""
    # here: trainer.rl loads torch, which only this path needs
    from trainer.rl.envs import ENV_NAMES

    return ENV_NAMES


def text(field, value, max_len):
    """A required name: a non-empty string of at most `max_len` characters, stripped."""
    if not isinstance(value, str) or not value.strip():
        raise InputError(field, f"{field} is required: a non-empty string of at most {max_len} characters")
    value = value.strip()
    if len(value) > max_len:
        raise InputError(field, f"{field} must be at most {max_len} characters, got {len(value)}")
    return value


def device(value):
    """The device a job asks for: auto, cpu, cuda or cuda:N."""
    if not isinstance(value, str) or not DEVICE_RE.fullmatch(value):  # fullmatch: "$" lets "cuda:1\n" through
        raise InputError("device", f"device must be {DEVICE_ACCEPTED}, got {value!r}")
    return value


def devices(value, device):
    """The number of devices a job trains on: an integer 1..DEVICES_MAX; several need a kind, not one GPU."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= DEVICES_MAX:
        raise InputError("devices", f"devices must be a whole number from 1 to {DEVICES_MAX}, got {value!r}")
    if value > 1 and device.startswith("cuda:"):
        raise InputError("devices", f"devices {value} needs device auto, cpu or cuda (one process per device); "
                                    f"{device} names one GPU")
    return value


def name_field(field, value, max_len):
    """A node or pool name: empty for any, else a name as its worker announces it."""
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > max_len or any(c.isspace() for c in value):
        raise InputError(field, f"{field} must be a {field} name (no spaces, at most {max_len} characters) or "
                                f"empty for any, got {value!r}")
    return value


def init_from(init_from, init_step):
    """Return (the job to continue, the checkpoint step) for Job.start, (None, None) when starting from the
    base policy, or raise InputError naming init_from or init_step."""
    if init_from is None or init_from == "":
        if init_step not in (None, ""):
            raise InputError("init_step", "init_step needs init_from: the id of the job whose checkpoint to start from")
        return None, None
    if isinstance(init_from, Job):
        source = init_from
    else:
        if isinstance(init_from, bool) or not (isinstance(init_from, int) or (isinstance(init_from, str)
                                                                               and init_from.strip().isdigit())):
            raise InputError("init_from", f"init_from must be the id of an ended job with a checkpoint, got {init_from!r}")
        source = Job.objects.filter(pk=int(init_from)).first() if int(init_from) < 2**31 else None
        if source is None:
            raise InputError("init_from", f"init_from must be the id of an ended job with a checkpoint; "
                                          f"there is no job {init_from}")
    refusal = source.continue_refusal()
    if refusal:
        raise InputError("init_from", f"init_from: {refusal}")
    kept = source.kept_checkpoint_steps()
    if init_step in (None, ""):
        return source, kept[-1]
    try:
        step = int(init_step) if not isinstance(init_step, (bool, float)) else None
    except (TypeError, ValueError):
        step = None
    if step not in kept:
        raise InputError("init_step", f"init_step must be one of the checkpoint steps job {source.pk} keeps "
                                      f"({', '.join(map(str, kept))}), or empty for its final one; got {init_step!r}")
    return source, step


def priority(value, user=None):
    """A job's priority in the line (trainer.models.Priority) from "low", "normal" or "high" (empty: normal); high
    only for admins (`user`: who asks; None: a system caller)."""
    value = Priority.parse("normal" if value in (None, "") else value)
    if value == Priority.HIGH and user is not None and not has_role(user, "admin"):
        raise InputError("priority", "priority high is for admins; choose low or normal")
    return value


def budget(value):
    """Return the budget as a Decimal (to the micro-dollar), None when not given, or raise InputError."""
    if value is None or value == "":
        return None
    accepted = (f"budget_usd must be a number of dollars >= 0 with at most {BUDGET_PLACES} decimal places, "
                "or null for no budget")
    if isinstance(value, bool) or not isinstance(value, (int, float, str, Decimal)):
        raise InputError("budget_usd", f"{accepted}, got {value!r}")
    try:
        amount = Decimal(str(value).strip())
    except InvalidOperation:
        raise InputError("budget_usd", f"{accepted}, got {value!r}") from None
    if not amount.is_finite() or amount < 0 or amount > BUDGET_MAX_USD:
        raise InputError("budget_usd", f"{accepted}, got {value!r}")
    if amount.as_tuple().exponent < -BUDGET_PLACES and amount != amount.quantize(Decimal(1).scaleb(-BUDGET_PLACES)):
        # Never round a budget silently: $0.0000004 is not a budget of $0.
        raise InputError("budget_usd", f"{accepted}, got {value!r}")
    return amount
