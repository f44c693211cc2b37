"""A recipe's typed parameters and the argv they fill: the one place a user's value meets a command.

An admin's recipe gives `argv`, a list of strings with `{name}` placeholders, and the parameters that fill
them. An operator gives values; each is checked against its parameter's type, bounds and pattern, and put
into the argv items that name it as text, inside that one item: a value never becomes several arguments,
never reaches a shell, and `; rm -rf / $(id)` arrives as that one literal argument. `{{` and `}}` are
literal braces.

Some placeholders are Yardstick's to fill, never a user's (RESERVED): the job's output directory, the
checkpoint a Resume continues from, the one a Continue starts from, the node's folders.

Imports nothing from Django: a node's worker renders the argv it runs with it.
"""

import math
import re
import string
from pathlib import PurePosixPath

KINDS = ("integer", "float", "choice", "boolean", "string", "path")
RESERVED = {
    "job_dir": "the job's output directory, under the node's data dir",
    "checkpoint": "the newest checkpoint of the job's output directory (resume arguments only)",
    "init_from": "the final checkpoint of the job a Continue starts from",
    "experiment": "the job's MLflow experiment (its environment), which the run reports under",
    "python": "the Python interpreter that runs Yardstick's worker on the node",
    "yardstick": "the directory Yardstick is installed in on the node (its examples are under it)",
    "models": "the node's folder of local models, <data dir>/models (trl-grpo-cpu makes its tiny model there)",
}
NAME = re.compile(r"^[a-z][a-z0-9_]{0,49}$")
STRING_MAX = 1000
HELP_MAX = 500


class ParamError(ValueError):
    """A bad parameter definition or value: `field` names it, the message says what is accepted."""

    def __init__(self, field, message):
        super().__init__(message)
        self.field, self.message = field, message


def _number(kind, value, field):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ParamError(field, f"{field} must be {'an integer' if kind == 'integer' else 'a number'}, got {value!r}")
    if kind == "integer" and not (isinstance(value, int) or float(value).is_integer()):
        raise ParamError(field, f"{field} must be an integer, got {value!r}")
    if not math.isfinite(value):
        raise ParamError(field, f"{field} must be a finite number, got {value!r}")
    return int(value) if kind == "integer" else float(value)


class Param:
    """One typed parameter: `name`, `kind` (KINDS), `default`, `help`, and per kind `minimum`/`maximum`
    (integer, float), `choices` (choice), `pattern` (string, a full match), `root` (path: values are paths
    under it)."""

    def __init__(self, spec, where="params"):
        if not isinstance(spec, dict):
            raise ParamError(where, f"{where} must be an object with name, kind and default, got {spec!r}")
        known = {"name", "kind", "default", "help", "minimum", "maximum", "choices", "pattern", "root"}
        unknown = sorted(set(spec) - known)
        if unknown:
            raise ParamError(f"{where}.{unknown[0]}", f"{where} has no field {unknown[0]!r}; "
                                                      f"a parameter has {', '.join(sorted(known))}")
        name = spec.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            raise ParamError(f"{where}.name", f"{where}.name must be lower-case letters, digits and _ (starting "
                                              f"with a letter, at most 50), got {name!r}")
        if name in RESERVED:
            raise ParamError(f"{where}.name", f"{where}.name {name!r} is Yardstick's to fill ({RESERVED[name]})")
        self.name, self.where = name, f"params.{name}"
        self.kind = spec.get("kind")
        if self.kind not in KINDS:
            raise ParamError(f"{self.where}.kind", f"{self.where}.kind must be one of {', '.join(KINDS)}, "
                                                   f"got {self.kind!r}")
        self.help = spec.get("help", "")
        if not isinstance(self.help, str) or len(self.help) > HELP_MAX:
            raise ParamError(f"{self.where}.help", f"{self.where}.help must be text of at most {HELP_MAX} characters")
        self.minimum = self.maximum = self.choices = self.pattern = self.root = None
        if self.kind in ("integer", "float"):
            for bound in ("minimum", "maximum"):
                if spec.get(bound) is not None:
                    setattr(self, bound, _number(self.kind, spec[bound], f"{self.where}.{bound}"))
            if self.minimum is not None and self.maximum is not None and self.minimum > self.maximum:
                raise ParamError(f"{self.where}.maximum", f"{self.where}.maximum ({self.maximum}) is below its "
                                                          f"minimum ({self.minimum})")
        elif self.kind == "choice":
            choices = spec.get("choices")
            if (not isinstance(choices, list) or not choices or len(set(map(str, choices))) != len(choices)
                    or not all(isinstance(c, str) and c and len(c) <= STRING_MAX for c in choices)):
                raise ParamError(f"{self.where}.choices", f"{self.where}.choices must be a list of distinct, "
                                                          f"non-empty strings, got {choices!r}")
            self.choices = choices
        elif self.kind == "string":
            pattern = spec.get("pattern", ".*")
            try:
                self.pattern = re.compile(pattern) if isinstance(pattern, str) else None
            except re.error as err:
                raise ParamError(f"{self.where}.pattern", f"{self.where}.pattern is not a regular expression "
                                                          f"({err}), got {pattern!r}") from None
            if self.pattern is None:
                raise ParamError(f"{self.where}.pattern", f"{self.where}.pattern must be a regular expression")
        elif self.kind == "path":
            root = spec.get("root")
            if not isinstance(root, str) or not PurePosixPath(root).is_absolute():
                raise ParamError(f"{self.where}.root", f"{self.where}.root must be an absolute path the values "
                                                       f"stay under, got {root!r}")
            self.root = PurePosixPath(root)
        if "default" not in spec:
            raise ParamError(f"{self.where}.default", f"{self.where}.default is required: what the Start form "
                                                      "offers and a launch without this value takes")
        self.default = self.value(spec["default"], field=f"{self.where}.default")

    def value(self, raw, field=None):
        """`raw` (from JSON or a form) as this parameter's type, or ParamError naming the parameter and what it
        accepts. A form's text is read as the type it must be ("3" for an integer, "true" for a boolean)."""
        field = field or self.name
        if self.kind in ("integer", "float"):
            if isinstance(raw, str):
                try:
                    raw = int(raw) if self.kind == "integer" else float(raw)
                except ValueError:
                    raise ParamError(field, f"{field} must be {'an integer' if self.kind == 'integer' else 'a number'}"
                                            f"{self._bounds()}, got {raw!r}") from None
            number = _number(self.kind, raw, field)
            if (self.minimum is not None and number < self.minimum) or \
                    (self.maximum is not None and number > self.maximum):
                raise ParamError(field, f"{field} must be{self._bounds()}, got {number}")
            return number
        if self.kind == "boolean":
            if isinstance(raw, str) and raw.lower() in ("true", "false"):
                raw = raw.lower() == "true"
            if not isinstance(raw, bool):
                raise ParamError(field, f"{field} must be true or false, got {raw!r}")
            return raw
        if not isinstance(raw, str):
            raise ParamError(field, f"{field} must be text, got {raw!r}")
        if len(raw) > STRING_MAX or "\x00" in raw:
            raise ParamError(field, f"{field} must be at most {STRING_MAX} characters with no NUL")
        if self.kind == "choice":
            if raw not in self.choices:
                raise ParamError(field, f"{field} must be one of {', '.join(self.choices)}, got {raw!r}")
            return raw
        if self.kind == "string":
            if not self.pattern.fullmatch(raw):
                raise ParamError(field, f"{field} must match {self.pattern.pattern}, got {raw!r}")
            return raw
        path = PurePosixPath(self.root, raw)
        if ".." in path.parts or not (path == self.root or self.root in path.parents):
            raise ParamError(field, f"{field} must be a path under {self.root} (no ..), got {raw!r}")
        return str(path)

    def _bounds(self):
        low, high = self.minimum, self.maximum
        if low is not None and high is not None:
            return f" from {low} to {high}"
        if low is not None:
            return f" >= {low}"
        return f" <= {high}" if high is not None else ""

    def to_dict(self):
        out = {"name": self.name, "kind": self.kind, "default": self.default, "help": self.help}
        extra = {"minimum": self.minimum, "maximum": self.maximum, "choices": self.choices,
                 "pattern": self.pattern.pattern if self.pattern else None, "root": str(self.root) if self.root else None}
        return {**out, **{k: v for k, v in extra.items() if v is not None}}


def placeholders(item, field):
    """The `{name}`s an argv item names, or ParamError for a brace that is neither `{name}` nor `{{`/`}}`."""
    if not isinstance(item, str):
        raise ParamError(field, f"{field} must be a string (an argv item), got {item!r}")
    try:
        parts = list(string.Formatter().parse(item))
    except ValueError as err:
        raise ParamError(field, f"{field} has an unmatched brace ({err}): write {{{{ and }}}} for literal ones, "
                                f"got {item!r}") from None
    names = []
    for _literal, name, spec, conversion in parts:
        if name is None:
            continue
        if spec or conversion or not NAME.match(name):
            raise ParamError(field, f"{field} may hold only {{name}} placeholders, got {{{name}}} in {item!r}")
        names.append(name)
    return names


def render(argv, values):
    """The argv with each `{name}` replaced by str(values[name]) inside its own item; bool as true/false."""
    def text(value):
        return ("true" if value else "false") if isinstance(value, bool) else str(value)

    out = []
    for item in argv:
        pieces = []
        for literal, name, _spec, _conversion in string.Formatter().parse(item):
            pieces.append(literal)
            if name is not None:
                pieces.append(text(values[name]))
        out.append("".join(pieces))
    return out
