"""The Alerts page and the alerts JSON API: each view parses its input and makes one call into alerts.models.

Viewers read; operators acknowledge and silence; admins manage rules and channels.
API errors are {"error": message}, with "field" for bad input (400); 404 for
an unknown id, 405 for a method not offered, 409 for an alert in the wrong state.
"""

from django.contrib import messages
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from alerts.models import KINDS, SILENCE_MAX_MIN, Alert, AlertRule, Channel, Delivery
from yardstick.auth import has_role, require_role
from yardstick.http import bad, int_param, methods
from yardstick.inputs import InputError, json_object

HISTORY = 100
DELIVERIES = 50


def listing(state=None, limit=HISTORY):
    """Alerts for the page and the API: every firing one first (newest first), then up to `limit` others."""
    alerts = Alert.objects.select_related("rule")
    firing = list(alerts.firing())
    rest = [] if state == "firing" else list(alerts.exclude(state=Alert.State.FIRING)[:limit])
    return (firing if state != "resolved" else []) + rest


def recent_deliveries(limit=DELIVERIES):
    return list(Delivery.objects.select_related("event__alert", "channel")[:limit])


def _missing(what, pk):
    return JsonResponse({"error": f"no {what} {pk}"}, status=404)


# -- /api/alerts ------------------------------------------------------------------------------------


@require_role("viewer")
def _alerts(request):
    """?state=firing|resolved (default both: firing first), ?limit= of the others (default 100)."""
    try:
        limit = int_param(request, "limit", HISTORY, 1, 1000)
        state = request.GET.get("state", "")
        if state not in ("", *Alert.State.values):
            raise InputError("state", f"state must be firing or resolved (or empty for both), got {state!r}")
    except InputError as err:
        return bad(err.field, err.message)
    return JsonResponse({"alerts": [a.to_dict() for a in listing(state or None, limit)],
                         "deliveries": [d.to_dict() for d in recent_deliveries()]})


alerts_api = methods(GET=_alerts)


@require_role("operator")
def _ack(request, alert_id):
    alert = Alert.objects.select_related("rule").filter(pk=alert_id).first()
    if alert is None:
        return _missing("alert", alert_id)
    if not alert.acknowledge(by=request.user.username):
        return JsonResponse({"error": alert.ack_refusal(), "state": alert.state}, status=409)
    return JsonResponse(alert.to_dict())


ack_api = methods(POST=_ack)


@require_role("operator")
def _silence(request, alert_id):
    """{"minutes": 1..10080}: nothing is sent about the alert, or its rule's next firings for its subject,
    until then."""
    alert = Alert.objects.select_related("rule").filter(pk=alert_id).first()
    if alert is None:
        return _missing("alert", alert_id)
    try:
        body = json_object(request.body)
        unknown = sorted(set(body) - {"minutes"})
        if unknown:
            raise InputError(unknown[0], f"unknown field {unknown[0]!r}; the accepted field is minutes")
        if "minutes" not in body:
            raise InputError("minutes",
                             f"minutes is required: a whole number of minutes from 1 to {SILENCE_MAX_MIN}")
        alert.silence(body["minutes"], by=request.user.username)
    except InputError as err:
        return bad(err.field, err.message)
    return JsonResponse(alert.to_dict())


silence_api = methods(POST=_silence)


# -- /api/alert-rules and /api/alert-channels --------------------------------------------------------


def _rules_of():
    return AlertRule.objects.prefetch_related("channels")


@require_role("viewer")
def _list_rules(request):
    return JsonResponse({"rules": [r.to_dict() for r in _rules_of()],
                         "kinds": {k: v.to_dict() for k, v in KINDS.items()}})


@require_role("admin")
def _create_rule(request):
    try:
        rule = AlertRule.create(json_object(request.body), by=request.user)
    except InputError as err:
        return bad(err.field, err.message)
    return JsonResponse(rule.to_dict(), status=201)


rules_api = methods(GET=_list_rules, POST=_create_rule)


@require_role("viewer")
def _rule(request, rule_id):
    rule = _rules_of().filter(pk=rule_id).first()
    return JsonResponse(rule.to_dict()) if rule else _missing("alert rule", rule_id)


@require_role("admin")
def _change_rule(request, rule_id):
    rule = AlertRule.objects.filter(pk=rule_id).first()
    if rule is None:
        return _missing("alert rule", rule_id)
    try:
        rule.change(json_object(request.body))
    except InputError as err:
        return bad(err.field, err.message)
    return JsonResponse(rule.to_dict())


@require_role("admin")
def _delete_rule(request, rule_id):
    deleted, _ = AlertRule.objects.filter(pk=rule_id).delete()
    return JsonResponse({"deleted": rule_id}) if deleted else _missing("alert rule", rule_id)


rule_api = methods(GET=_rule, PATCH=_change_rule, DELETE=_delete_rule)


@require_role("admin")
def _list_channels(request):
    """Admins only: a webhook's URL is often its secret."""
    return JsonResponse({"channels": [c.to_dict() for c in Channel.objects.all()]})


@require_role("admin")
def _create_channel(request):
    try:
        body = json_object(request.body)
        unknown = sorted(set(body) - {"name", "kind", "target"})
        if unknown:
            raise InputError(unknown[0], f"unknown field {unknown[0]!r}; accepted fields are name, kind, target")
        channel = Channel.create(name=body.get("name"), kind=body.get("kind"), target=body.get("target"))
    except InputError as err:
        return bad(err.field, err.message)
    return JsonResponse(channel.to_dict(), status=201)


channels_api = methods(GET=_list_channels, POST=_create_channel)


# -- the page ----------------------------------------------------------------------------------------


@never_cache
@require_GET
@require_role("viewer")
def alerts_page(request):
    """Firing alerts, then history, deliveries and rules; ?part=body is the part the page's script reloads."""
    admin = has_role(request.user, "admin")
    context = {
        "alerts": listing(), "deliveries": recent_deliveries(), "rules": list(_rules_of()),
        "channels": list(Channel.objects.all()) if admin else [], "kinds": KINDS,
        "has_channels": Channel.objects.exists(),  # whether alerts reach anyone but this page's readers
        "channel_kinds": Channel.Kind.choices, "silence_max": SILENCE_MAX_MIN,
    }
    template = "alerts/_body.html" if request.GET.get("part") == "body" else "alerts/alerts.html"
    return render(request, template, context)


@require_POST
@require_role("operator")
def acknowledge(request, alert_id):
    alert = get_object_or_404(Alert.objects.select_related("rule"), pk=alert_id)
    if alert.acknowledge(by=request.user.username):
        messages.success(request, f"Alert {alert.pk} acknowledged: nothing more is sent about it.")
    else:
        messages.error(request, f"Not acknowledged: {alert.ack_refusal()}.")
    return redirect("alerts")


@require_POST
@require_role("operator")
def silence(request, alert_id):
    alert = get_object_or_404(Alert.objects.select_related("rule"), pk=alert_id)
    try:
        until = alert.silence(request.POST.get("minutes", "").strip(), by=request.user.username)
    except InputError as err:
        messages.error(request, f"Not silenced: {err.message}.")
    else:
        messages.success(request, f"Alert {alert.pk} silenced until {until:%Y-%m-%d %H:%M} UTC.")
    return redirect("alerts")


def _rule_fields(post, creating):
    """The rule form's fields as the model takes them (blank threshold and duration: the kind's defaults)."""
    fields = {k: post[k].strip() for k in ("name", "kind", "scope", "threshold", "duration") if k in post}
    # The whole form sends its checkbox only when ticked; the Enable/Disable button sends enabled=on|off alone.
    if creating or "name" in post or "enabled" in post:
        fields["enabled"] = post.get("enabled") == "on"
    if "channels" in post or creating or "name" in post:
        ids = post.getlist("channels")
        bad = [i for i in ids if not i.isdigit()]
        if bad:
            raise InputError("channels", f"channels must be ids of existing channels, got {bad[0]!r}")
        fields["channels"] = [int(i) for i in ids]
    return fields


@require_POST
@require_role("admin")
def create_rule(request):
    try:
        rule = AlertRule.create(_rule_fields(request.POST, creating=True), by=request.user)
    except InputError as err:
        messages.error(request, f"Rule not created: {err.message}.")
    else:
        messages.success(request, f"Rule {rule.pk} {rule.name!r} created: {rule.describe()}.")
    return redirect("alerts")


@require_POST
@require_role("admin")
def edit_rule(request, rule_id):
    rule = get_object_or_404(AlertRule, pk=rule_id)
    try:
        rule.change(_rule_fields(request.POST, creating=False))
    except InputError as err:
        messages.error(request, f"Rule {rule.pk} not changed: {err.message}.")
    else:
        state = "enabled" if rule.enabled else "disabled"
        messages.success(request, f"Rule {rule.pk} {rule.name!r} saved ({state}): {rule.describe()}.")
    return redirect("alerts")


@require_POST
@require_role("admin")
def create_channel(request):
    post = request.POST
    try:
        channel = Channel.create(name=post.get("name", ""), kind=post.get("kind", ""), target=post.get("target", ""))
    except InputError as err:
        messages.error(request, f"Channel not created: {err.message}.")
    else:
        messages.success(request, f"Channel {channel.name!r} created.")
    return redirect("alerts")
