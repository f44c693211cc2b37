"""Input that no view should have to think about: text PostgreSQL cannot store, JSON nested past use, times past the calendar.

PostgreSQL refuses NUL (U+0000) in text (DataError) and UTF-8 cannot encode a
lone surrogate (UnicodeEncodeError): both used to answer 500 from wherever the
text reached the database. `RefuseUnstorableText` (middleware) refuses them in
every query parameter, form field and path part, and `json_object` in every
JSON body, each as a 400 naming the parameter. `json_object` also caps nesting
(Python's parser recurses: 100,000 `[` was a RecursionError) and `check_moment`
keeps times inside a calendar that `± a year` cannot overflow.
"""

import json
from datetime import datetime, timezone

from django.http import JsonResponse
from django.shortcuts import render

from yardstick.auth import is_api, is_tracking

# Deeper than any body the APIs take (a job's config is 2 levels, MLflow's are 3) by a wide margin.
MAX_JSON_DEPTH = 32
TEXT_ACCEPTED = "text without NUL (U+0000) or lone surrogate (U+D800-U+DFFF) characters"
# Times that pages and APIs accept: wide enough for any telemetry or cost period, narrow enough that
# adding a day, a year's range or a default window never leaves datetime's years 1..9999.
EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)
LATEST = datetime(2100, 1, 1, tzinfo=timezone.utc)
MOMENT_ACCEPTED = f"a time from {EARLIEST:%Y-%m-%d} to {LATEST:%Y-%m-%d} (UTC)"


# The bodies Django parses into request.POST (a JSON body is json_object's).
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


class InputError(ValueError):
    """Input that cannot be used; `field` names it, `message` says what is accepted."""

    def __init__(self, field, message):
        super().__init__(message)
        self.field = field
        self.message = message


class NotJson(InputError):
    """A body that is not JSON at all (as opposed to JSON that is refused)."""

    def __init__(self, message):
        super().__init__("body", message)


def text_problem(value):
    """Why the string `value` cannot be stored as text, or None when it can."""
    if "\x00" in value:
        return "contains a NUL (U+0000) character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone surrogate (U+D800-U+DFFF) character"
    return None


def check_text(field, value):
    """Return `value` (a str), or raise InputError naming `field` when it cannot be stored."""
    problem = text_problem(value)
    if problem:
        raise InputError(field, f"{field} {problem}; it must be {TEXT_ACCEPTED}")
    return value


def check_moment(field, moment):
    """Return the aware datetime `moment`, or raise InputError when it is outside EARLIEST..LATEST."""
    if not EARLIEST <= moment <= LATEST:
        raise InputError(field, f"{field} must be {MOMENT_ACCEPTED}, got {moment.isoformat()}")
    return moment


def _too_deep(max_depth):
    return InputError("body", f"the body must be a JSON object nested at most {max_depth} levels deep")


def _check_value(value, path, depth, max_depth):
    if depth > max_depth:
        raise _too_deep(max_depth)
    if isinstance(value, str):
        check_text(path, value)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(f"{path}.{key}" if path != "body" else "field name", key)
            _check_value(item, key if path == "body" else f"{path}.{key}", depth + 1, max_depth)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_value(item, f"{path}[{index}]", depth + 1, max_depth)


def json_object(raw, max_depth=MAX_JSON_DEPTH):
    """The JSON object in the bytes `raw`, or InputError("body" or the field) saying what is accepted.

    Every string in it, keys included, is storable text (see text_problem); an error names
    the field holding the bad one ("name", "config.env", "tags[0].key").
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise NotJson(f"the body must be a JSON object in UTF-8 ({err})") from None
    try:
        body = json.loads(text)
    except ValueError as err:
        raise NotJson(f"the body must be a JSON object ({err})") from None
    except RecursionError:  # the C parser stops cleanly at Python's recursion limit (about 1,000 levels)
        raise _too_deep(max_depth) from None
    if not isinstance(body, dict):
        raise InputError("body", f"the body must be a JSON object, got {type(body).__name__}")
    _check_value(body, "body", 1, max_depth)
    return body


def form_json_object(field, text, example):
    """The JSON object a form's text field `field` holds ({} when empty); InputError naming it and showing
    `example` otherwise."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, dict):
        raise InputError(field, f"{field} must be a JSON object such as {example}, got {text[:80]!r}")
    _check_value(value, field, 1, MAX_JSON_DEPTH)
    return value


class RefuseUnstorableText:
    """Answer 400 to a request whose query parameters, form fields or path parts hold text that cannot be stored.

    After authentication and CSRF (process_view), so every other rule answers first; the
    400 speaks each area's error shape: MLflow's on the tracking API, {"error", "field"}
    on /api/, the site's 400 page elsewhere.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        try:
            for name, value in view_kwargs.items():
                if isinstance(value, str):
                    check_text(name, value)
            for name, values in request.GET.lists():
                for value in [name, *values]:
                    check_text(name, value)
            if request.method == "POST" and request.content_type in FORM_TYPES:
                for name, values in request.POST.lists():
                    for value in [name, *values]:
                        check_text(name, value)
        except InputError as err:
            return refusal(request, err)
        return None


def refusal(request, err):
    """The 400 for InputError `err`, in the error shape of the area `request` is in."""
    if is_tracking(request):
        return JsonResponse({"error_code": "INVALID_PARAMETER_VALUE", "message": err.message}, status=400)
    if is_api(request):
        return JsonResponse({"error": err.message, "field": err.field}, status=400)
    return render(request, "400.html", {"message": err.message}, status=400)
