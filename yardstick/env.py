"""Small strict readers for settings that come from environment variables.

Each returns the default when the variable is unset or empty, and raises
ImproperlyConfigured naming the variable, the value and what is accepted when
the value is bad, so a typo stops start-up instead of being ignored.
"""

import os
from pathlib import Path
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off"}


def _raw(name, environ):
    value = (environ if environ is not None else os.environ).get(name, "")
    return value.strip()


def envbool(name, default, environ=None):
    value = _raw(name, environ)
    if not value:
        return default
    if value.lower() in TRUE:
        return True
    if value.lower() in FALSE:
        return False
    raise ImproperlyConfigured(
        f"{name} must be one of true/false/1/0/yes/no/on/off, got {value!r}"
    )


def envint(name, default, minimum=None, environ=None):
    value = _raw(name, environ)
    if not value:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name} must be >= {minimum}, got {number}")
    return number


def envlist(name, default, environ=None):
    value = _raw(name, environ)
    if not value:
        return list(default)
    items = [item.strip() for item in value.split(",")]
    if any(not item for item in items):
        raise ImproperlyConfigured(
            f"{name} must be a comma-separated list with no empty items, got {value!r}"
        )
    return items


def envchoice(name, choices, default, environ=None):
    """Return the one of `choices` that the value in `name` spells, in any case."""
    value = _raw(name, environ)
    if not value:
        return default
    for choice in choices:
        if value.lower() == choice.lower():
            return choice
    raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, got {value!r}")


def envpath(name, default, environ=None):
    value = _raw(name, environ)
    return Path(value or default).expanduser().resolve()


def envurl(name, schemes, environ=None):
    """Return the URL in `name`, or None when unset; its scheme must be one of `schemes`."""
    value = _raw(name, environ)
    if not value:
        return None
    parts = urlsplit(value)
    accepted = ", ".join(f"{s}://" for s in schemes)
    if parts.scheme not in schemes:
        raise ImproperlyConfigured(f"{name} must start with one of {accepted}, got {value!r}")
    if parts.scheme not in ("unix", "redis+socket") and not parts.hostname:
        raise ImproperlyConfigured(f"{name} must name a host, got {value!r}")
    return value
