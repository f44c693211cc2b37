"""A job's stop-loss: the rule that stops a run which has stopped buying intelligence.

A stop-loss is a JSON object on the job (`Job.stop_loss`), any of:
- `usd` and `points` (together): stop when the last `usd` dollars the run spent
  bought fewer than `points` points on its score (the marginal rule);
- `reward_drop`, `kl_max`, `entropy_min`, with `steps` (default 5): stop when
  the reward mean stays `reward_drop` below its best, the KL stays above
  `kl_max`, or the entropy stays below `entropy_min`, for `steps` steps (the
  collapse rules, the same tests as the alert kinds reward_drop, kl_high,
  entropy_low).
`from_step` (set by Yardstick, not by people) is the step the rule judges from:
0, or where the job was last resumed, so a resumed job first spends the window
again before the rule can stop it once more.

This module reads and describes the rule; alerts/stoploss.py evaluates it
(it needs the costs and the alert conditions) and `Job.stop_for_loss` acts.
"""

import math
from decimal import Decimal, InvalidOperation

from yardstick.inputs import InputError

FIELD = "stop_loss"
USD_MAX = Decimal("9999999999.999999")
USD_PLACES = 6
STEPS_DEFAULT = 5
STEPS_MAX = 100_000
COLLAPSE = ("reward_drop", "kl_max", "entropy_min")
ACCEPTED = ("usd", "points", *COLLAPSE, "steps")
ACCEPTED_TEXT = ("an object with usd and points (stop when the last usd dollars bought fewer than points points), "
                 "and/or reward_drop, kl_max, entropy_min with steps (stop when one holds for steps steps); "
                 "{} or null for none")


def parse(raw):
    """The stop-loss to store from raw input (an object, or None/{} for none); InputError naming the field."""
    if raw is None or raw == {} or raw == "":
        return {}
    if not isinstance(raw, dict):
        raise InputError(FIELD, f"{FIELD} must be {ACCEPTED_TEXT}; got {raw!r}")
    unknown = sorted(set(raw) - set(ACCEPTED))
    if unknown:
        raise InputError(f"{FIELD}.{unknown[0]}", f"unknown stop-loss field {unknown[0]!r}; accepted: {', '.join(ACCEPTED)}")
    given = {k: v for k, v in raw.items() if v is not None and v != ""}
    if ("usd" in given) != ("points" in given):
        missing = "points" if "usd" in given else "usd"
        raise InputError(f"{FIELD}.{missing}", f"{FIELD}.usd and {FIELD}.points go together (the last usd dollars "
                                               f"must buy at least points points); {FIELD}.{missing} is missing")
    out = {}
    if "usd" in given:
        out["usd"] = str(_usd(given["usd"]))
        out["points"] = _number("points", given["points"], minimum=0, inclusive=True,
                                words="a number of points >= 0")
    for key, words in (("reward_drop", "a reward drop > 0"), ("kl_max", "a KL > 0"), ("entropy_min", "an entropy > 0")):
        if key in given:
            out[key] = _number(key, given[key], minimum=0, inclusive=False, words=words)
    if any(k in out for k in COLLAPSE):
        out["steps"] = _steps(given.get("steps", STEPS_DEFAULT))
    elif "steps" in given:
        raise InputError(f"{FIELD}.steps", f"{FIELD}.steps counts the steps of reward_drop, kl_max or entropy_min; "
                                           "give one of them with it")
    if not out:
        raise InputError(FIELD, f"{FIELD} must be {ACCEPTED_TEXT}; got {raw!r}")
    return out


def _usd(value):
    accepted = f"{FIELD}.usd must be dollars > 0 with at most {USD_PLACES} decimal places"
    if isinstance(value, bool) or not isinstance(value, (int, float, str, Decimal)):
        raise InputError(f"{FIELD}.usd", f"{accepted}, got {value!r}")
    try:
        amount = Decimal(str(value).strip())
    except InvalidOperation:
        raise InputError(f"{FIELD}.usd", f"{accepted}, got {value!r}") from None
    if (not amount.is_finite() or amount <= 0 or amount > USD_MAX
            or amount != amount.quantize(Decimal(1).scaleb(-USD_PLACES))):
        raise InputError(f"{FIELD}.usd", f"{accepted}, got {value!r}")
    return Decimal(int(amount)) if amount == amount.to_integral() else amount


def _number(key, value, minimum, inclusive, words):
    field = f"{FIELD}.{key}"
    try:
        number = float(value) if not isinstance(value, bool) and isinstance(value, (int, float, str)) else None
    except ValueError:
        number = None
    if number is None or not math.isfinite(number) or (number < minimum if inclusive else number <= minimum):
        raise InputError(field, f"{field} must be {words}, got {value!r}")
    return number


def _steps(value):
    field = f"{FIELD}.steps"
    try:
        steps = int(value) if not isinstance(value, bool) and str(value).strip().lstrip("-").isdigit() else None
    except ValueError:
        steps = None
    if steps is None or not 1 <= steps <= STEPS_MAX:
        raise InputError(field, f"{field} must be a whole number of steps from 1 to {STEPS_MAX}, got {value!r}")
    return steps


def describe(spec):
    """The rule in words, as the pages show it; "" for none."""
    if not spec:
        return ""
    parts = []
    if "usd" in spec:
        parts.append(f"the last ${spec['usd']} bought fewer than {spec['points']:g} point"
                     f"{'' if spec['points'] == 1 else 's'}")
    collapse = [f"reward mean {spec['reward_drop']:g} below its best" if "reward_drop" in spec else "",
                f"KL above {spec['kl_max']:g}" if "kl_max" in spec else "",
                f"entropy below {spec['entropy_min']:g}" if "entropy_min" in spec else ""]
    collapse = [c for c in collapse if c]
    if collapse:
        parts.append(f"{' or '.join(collapse)} for {spec['steps']} steps")
    text = "stop when " + ", or when ".join(parts)
    if spec.get("from_step"):
        text += f" (judged from step {spec['from_step']}, where it was resumed)"
    return text
