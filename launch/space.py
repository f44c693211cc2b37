"""A sweep's search space over a recipe's typed parameters (launch/params.py): what each searched parameter may take,
checked against the parameter's own type and bounds, so every value a search draws is one a launch accepts.

    {"lr": {"low": 1e-6, "high": 1e-3, "log": true},   # integer or float: a range, log scale where asked
     "group_size": {"low": 4, "high": 16},
     "schedule": {"choices": ["cosine", "constant"]}}   # any kind: a list of values, each the parameter's

A range lies within the parameter's minimum and maximum, low below high; a log range stays above 0 (a log scale
through 0 has no meaning). Choices are distinct values the parameter accepts (a choice parameter's own choices, true
and false for a boolean, text its pattern or root allows). Parameters the space does not name keep the value the
sweep gives them (their defaults unless told). A bad space raises ParamError naming the field (`space.lr.low`) and
what is accepted.

Imports nothing from Django: a pure core, tested alone (tests/launch/test_space.py).
"""

import math
from dataclasses import dataclass

from launch.params import Param, ParamError

SPACE_MAX = 20  # searched parameters in one sweep
CHOICES_MAX = 100


@dataclass(frozen=True)
class Dimension:
    """One searched parameter: a range (`low`, `high`, `log`, integer or not) or `choices`."""

    name: str
    kind: str  # "integer", "float" or "choice"
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: tuple = ()

    def to_dict(self):
        if self.kind == "choice":
            return {"name": self.name, "choices": list(self.choices)}
        return {"name": self.name, "low": self.low, "high": self.high, "log": self.log,
                "integer": self.kind == "integer"}

    @classmethod
    def from_dict(cls, raw):
        """The Dimension `to_dict` wrote (as a sweep keeps its space)."""
        if "choices" in raw:
            return cls(raw["name"], "choice", choices=tuple(raw["choices"]))
        return cls(raw["name"], "integer" if raw["integer"] else "float", low=raw["low"], high=raw["high"],
                   log=raw["log"])


def parse_space(raw, params):
    """[Dimension] of the space `raw` ({name: {...}}) over the recipe's `params` ([Param] or their specs); ParamError
    naming the first bad field."""
    params = {p.name: p for p in (p if isinstance(p, Param) else Param(p) for p in params)}
    if not isinstance(raw, dict) or not raw:
        raise ParamError("space", f"space must be an object naming at least one parameter to search, e.g. "
                                  f"{{\"lr\": {{\"low\": 1e-6, \"high\": 1e-3, \"log\": true}}}}, got {raw!r}")
    if len(raw) > SPACE_MAX:
        raise ParamError("space", f"space may search at most {SPACE_MAX} parameters, got {len(raw)}")
    out = []
    for name, spec in raw.items():
        field = f"space.{name}"
        param = params.get(name)
        if param is None:
            raise ParamError(field, f"the recipe has no parameter {name!r}; its parameters are "
                                    f"{', '.join(sorted(params)) or 'none'}")
        if not isinstance(spec, dict):
            raise ParamError(field, f"{field} must be an object: {{low, high, log}} or {{choices}}, got {spec!r}")
        if "choices" in spec:
            out.append(_choices(param, spec, field))
        else:
            out.append(_range(param, spec, field))
    return out


def _choices(param, spec, field):
    unknown = sorted(set(spec) - {"choices"})
    if unknown:
        raise ParamError(f"{field}.{unknown[0]}", f"{field} gives choices, so it takes no {unknown[0]!r}")
    raw = spec["choices"]
    if not isinstance(raw, list) or not raw or len(raw) > CHOICES_MAX:
        raise ParamError(f"{field}.choices", f"{field}.choices must be a list of 1 to {CHOICES_MAX} values, got "
                                             f"{raw!r}")
    values = tuple(param.value(value, field=f"{field}.choices[{i}]") for i, value in enumerate(raw))
    if len(set(values)) != len(values):
        raise ParamError(f"{field}.choices", f"{field}.choices must be distinct, got {raw!r}")
    return Dimension(param.name, "choice", choices=values)


def _range(param, spec, field):
    if param.kind not in ("integer", "float"):
        raise ParamError(field, f"{field}: {param.name} is a {param.kind} parameter: give choices, a list of its "
                                "values (a range is for integer and float parameters)")
    unknown = sorted(set(spec) - {"low", "high", "log"})
    if unknown:
        raise ParamError(f"{field}.{unknown[0]}", f"{field} takes low, high and log; got {unknown[0]!r}")
    bounds = []
    for end in ("low", "high"):
        if end not in spec:
            raise ParamError(f"{field}.{end}", f"{field}.{end} is required: the range's {end} end")
        bounds.append(param.value(spec[end], field=f"{field}.{end}"))  # a number within the parameter's own bounds
    low, high = bounds
    if not low < high:
        raise ParamError(f"{field}.high", f"{field}.high ({high}) must be above its low ({low})")
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise ParamError(f"{field}.log", f"{field}.log must be true or false, got {log!r}")
    if log and low <= 0:
        raise ParamError(f"{field}.low", f"{field}.low must be above 0 for a log scale (a log range cannot reach or "
                                         f"cross 0), got {low}")
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ParamError(field, f"{field} must be a finite range")
    return Dimension(param.name, param.kind, low=low, high=high, log=log)
