"""Alert rules, the alerts they fire, their history, and where notifications go.

A rule (AlertRule) names a condition kind (KINDS), a threshold and a duration,
and optionally a scope ("team:research", "node:gpu-a", "job:12"). The periodic
evaluation (alerts/evaluate.py) asks the rule's condition (alerts/conditions.py)
which subjects ("device:gpu-a/0", "node:gpu-a", "team:research", "job:12") are
in breach now, fires an Alert for each new one and resolves each firing one that
is no longer. One firing Alert per (rule, subject) until it resolves: a partial
unique index holds that even for two evaluators at once. Every change is an
AlertEvent; each fired or resolved event is queued as a Delivery to each of the
rule's channels (alerts/delivery.py sends them, retrying with back-off).
"""

from datetime import timedelta
from urllib.parse import quote, urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, models, transaction
from django.utils import timezone

from yardstick.inputs import InputError, check_text
from yardstick.live import publish

# The live topic of the Alerts page: every fire, resolve, acknowledgement, silence and delivery.
TOPIC = "alerts"
NAME_MAX = 200
SCOPE_MAX = 200
TARGET_MAX = 1000
# The longest silence an operator may set: a week.
SILENCE_MAX_MIN = 7 * 24 * 60
DURATION_MAX = 100_000
THRESHOLD_MAX = 1e12


class Kind:
    """What one rule kind means: its threshold and duration (with their units) and the scopes it takes."""

    def __init__(self, label, threshold, duration, duration_unit, scopes, default_duration=0):
        self.label = label
        self.threshold = threshold  # what the threshold means, or None when the kind takes none
        self.duration = duration  # what the duration means, or None when the kind takes none
        self.duration_unit = duration_unit  # "minutes", "steps" or None
        self.scopes = scopes  # the scope prefixes accepted ("team", "node", "job")
        self.default_duration = default_duration

    def to_dict(self):
        return {"label": self.label, "threshold": self.threshold, "duration": self.duration,
                "duration_unit": self.duration_unit, "scopes": list(self.scopes),
                "default_duration": self.default_duration}


KINDS = {
    "gpu_idle": Kind("GPU idle", None, "idle for longer than this many minutes", "minutes", ("node", "team"), 30),
    "node_stale": Kind("Node stale", None, "stale for longer than this many minutes", "minutes", ("node", "team"),
                       5),
    "device_unhealthy": Kind("Device unhealthy", None, None, None, ("node", "team")),
    "idle_spend": Kind("Idle spend", "dollars per hour of idle device time, per team",
                       "averaged over the last this many minutes", "minutes", ("team",), 60),
    "job_failed": Kind("Job failed", None, None, None, ("team", "job")),
    "cluster_unreachable": Kind("Cluster unreachable", None, "not answering for longer than this many minutes",
                                "minutes", ("cluster",), 5),
    "queued_long": Kind("Queued too long", None, "waiting in the line for devices longer than this many minutes",
                        "minutes", ("team", "job"), 30),
    "budget": Kind("Budget", "percent of the job's budget spent (e.g. 80 or 100)", None, None, ("team", "job")),
    "reward_drop": Kind("Reward collapse", "drop of train/reward_mean below its best so far",
                        "for this many consecutive steps", "steps", ("team", "job"), 5),
    "kl_high": Kind("KL too high", "limit on train/kl", "for this many consecutive steps", "steps",
                    ("team", "job"), 5),
    "entropy_low": Kind("Entropy too low", "floor on train/entropy", "for this many consecutive steps", "steps",
                        ("team", "job"), 5),
}
# Ids, not names, follow these scope prefixes ("job:12", "sweep:3").
ID_SCOPES = ("job", "sweep")


def register_kind(name, kind):
    """Add a rule kind an app above alerts defines (its condition: alerts.conditions.register), from its ready()."""
    KINDS[name] = kind
    return kind


def kinds_accepted():
    return ", ".join(KINDS)
# The rules a fresh install starts with (`up` makes them on its first run, beside the admin user), so a failed job
# or a cluster that stopped answering shows on the Alerts page before anyone thought to ask; the whole fleet, no
# channel. An admin changes, disables or deletes them like any other rule.
DEFAULT_RULES = (
    {"name": "Job failed", "kind": "job_failed"},
    {"name": "Cluster unreachable", "kind": "cluster_unreachable"},  # after KINDS' default duration, 5 minutes
)


def _iso(dt):
    return dt.isoformat() if dt else None


class Channel(models.Model):
    """Where notifications go: a webhook (generic JSON or Slack-compatible {"text"}) or email addresses."""

    class Kind(models.TextChoices):
        WEBHOOK = "webhook", "webhook (JSON)"
        SLACK = "slack", "webhook (Slack-compatible)"
        EMAIL = "email", "email"

    name = models.CharField(max_length=NAME_MAX, unique=True)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    target = models.TextField(help_text="the webhook's URL, or comma-separated email addresses")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return f"{self.name} ({self.kind})"

    @property
    def addresses(self):
        return [a.strip() for a in self.target.split(",") if a.strip()]

    @classmethod
    def create(cls, *, name, kind, target):
        """A new channel from raw input; InputError naming the first bad field (nothing stored)."""
        channel = cls(name=name, kind=kind, target=target)
        channel.validate()
        try:
            with transaction.atomic():
                channel.save()
        except IntegrityError:
            raise InputError("name", f"name {channel.name!r} is taken; channel names must be unique") from None
        return channel

    def validate(self):
        """Normalise and check in place; raise InputError on the first bad field."""
        self.name = _name("name", self.name)
        if self.kind not in self.Kind.values:
            raise InputError("kind", f"kind must be one of {', '.join(self.Kind.values)}, got {self.kind!r}")
        if not isinstance(self.target, str) or not self.target.strip() or len(self.target) > TARGET_MAX:
            raise InputError("target", f"target must be a URL or email addresses (1 to {TARGET_MAX} characters), "
                                       f"got {self.target!r}")
        self.target = check_text("target", self.target.strip())
        if self.kind == self.Kind.EMAIL:
            for address in self.addresses or [""]:
                try:
                    validate_email(address)
                except ValidationError:
                    raise InputError("target", "target of an email channel must be email addresses, "
                                               f"comma-separated, got {address!r}") from None
        else:
            parts = urlsplit(self.target)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise InputError("target", f"target of a {self.kind} channel must be an http:// or https:// URL "
                                           f"with a host, got {self.target!r}")
        return self

    def to_dict(self):
        return {"id": self.pk, "name": self.name, "kind": self.kind, "target": self.target}


def _name(field, value):
    if not isinstance(value, str) or not value.strip() or len(value.strip()) > NAME_MAX:
        raise InputError(field, f"{field} must be text of 1 to {NAME_MAX} characters, got {value!r}")
    return check_text(field, value.strip())


def _number(field, value, minimum, maximum, integer=False, accepted=""):
    what = accepted or ("a whole number" if integer else "a number")
    if isinstance(value, bool) or value is None or value == "":
        raise InputError(field, f"{field} must be {what} from {minimum} to {maximum:g}, got {value!r}")
    try:
        number = float(value) if not isinstance(value, (int, float)) else value
    except (TypeError, ValueError):
        raise InputError(field, f"{field} must be {what} from {minimum} to {maximum:g}, got {value!r}") from None
    if number != number or not minimum <= number <= maximum or (integer and number != int(number)):
        raise InputError(field, f"{field} must be {what} from {minimum} to {maximum:g}, got {value!r}")
    return int(number) if integer else float(number)


class AlertRule(models.Model):
    """A condition (KINDS) with a threshold and a duration, optionally scoped, and the channels it notifies."""

    name = models.CharField(max_length=NAME_MAX)
    kind = models.CharField(max_length=20, choices=[(k, v.label) for k, v in KINDS.items()])
    threshold = models.FloatField(null=True, blank=True, help_text="see KINDS: its unit depends on the kind")
    duration = models.IntegerField(default=0, help_text="minutes or steps (see KINDS); 0 where the kind takes none")
    # "team:<name>", "node:<name>" or "job:<id>" (the kind says which); empty: the whole fleet.
    scope = models.CharField(max_length=SCOPE_MAX, blank=True, default="")
    channels = models.ManyToManyField(Channel, blank=True, related_name="rules")
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name", "id"]

    def __str__(self):
        return f"rule {self.pk} {self.name!r} ({self.kind})"

    FIELDS = ("name", "kind", "threshold", "duration", "scope", "channels", "enabled")

    @property
    def spec(self):
        return KINDS[self.kind]

    def scope_parts(self):
        """("team"|"node"|"job"|"cluster"|None, value): what the rule is limited to."""
        if not self.scope:
            return None, None
        prefix, _, value = self.scope.partition(":")
        return prefix, (int(value) if prefix in ID_SCOPES else value)

    @classmethod
    def create(cls, fields, by=None):
        """A new rule from raw input (FIELDS; channels as a list of channel ids); InputError, nothing stored."""
        rule = cls(created_by=by)
        channels = rule.apply({"enabled": True, **fields}, creating=True)
        with transaction.atomic():
            rule.save()
            rule.channels.set(channels)
        return rule

    @classmethod
    def create_defaults(cls):
        """Create each of DEFAULT_RULES that no rule of its kind for the whole fleet stands for; return those made."""
        return [cls.create(fields) for fields in DEFAULT_RULES
                if not cls.objects.filter(kind=fields["kind"], scope="").exists()]

    def change(self, fields):
        """Change the rule from raw input (any of FIELDS); InputError naming the first bad field, nothing stored.

        A changed condition takes effect at the next evaluation; disabling resolves its firing alerts then."""
        rule = AlertRule.objects.get(pk=self.pk)
        channels = rule.apply(fields, creating=False)
        with transaction.atomic():
            rule.save()
            if channels is not None:
                rule.channels.set(channels)
        self.refresh_from_db()
        return self

    def apply(self, fields, creating):
        """Set the fields given (raw input) after checking all of them; return the channels given, or None."""
        if not isinstance(fields, dict):
            raise InputError("body", "the body must be a JSON object")
        unknown = sorted(set(fields) - set(self.FIELDS))
        if unknown:
            raise InputError(unknown[0], f"unknown field {unknown[0]!r}; accepted fields are {', '.join(self.FIELDS)}")
        if creating:
            for required in ("name", "kind"):
                if required not in fields:
                    raise InputError(required, f"{required} is required")
        if "name" in fields:
            self.name = _name("name", fields["name"])
        if "kind" in fields:
            if fields["kind"] not in KINDS:
                raise InputError("kind", f"kind must be one of {kinds_accepted()}, got {fields['kind']!r}")
            self.kind = fields["kind"]
        spec = self.spec
        if "threshold" in fields or creating or "kind" in fields:
            raw = fields.get("threshold", self.threshold if not creating else None)
            if spec.threshold is None:
                if raw not in (None, ""):
                    raise InputError("threshold", f"a {self.kind} rule takes no threshold; leave it empty")
                self.threshold = None
            else:
                if raw in (None, ""):
                    raise InputError("threshold", f"threshold is required for a {self.kind} rule: {spec.threshold}")
                minimum = -THRESHOLD_MAX if self.kind == "entropy_low" else 0
                self.threshold = _number("threshold", raw, minimum, THRESHOLD_MAX,
                                         accepted=f"a number ({spec.threshold})")
                if self.kind == "budget" and self.threshold <= 0:
                    raise InputError("threshold", f"threshold must be a percent above 0, got {raw!r}")
        if "duration" in fields or creating or "kind" in fields:
            raw = fields.get("duration", self.duration if not creating else None)
            if spec.duration is None:
                if raw not in (None, "", 0):
                    raise InputError("duration", f"a {self.kind} rule takes no duration; leave it empty or 0")
                self.duration = 0
            else:
                if raw in (None, ""):
                    raw = spec.default_duration
                self.duration = _number("duration", raw, 1, DURATION_MAX, integer=True,
                                        accepted=f"a whole number of {spec.duration_unit} ({spec.duration})")
        if "scope" in fields or "kind" in fields:
            self.scope = self._scope(fields.get("scope", self.scope))
        if "enabled" in fields:
            if not isinstance(fields["enabled"], bool):
                raise InputError("enabled", f"enabled must be true or false, got {fields['enabled']!r}")
            self.enabled = fields["enabled"]
        if "channels" not in fields:
            return [] if creating else None
        ids = fields["channels"]
        if not isinstance(ids, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 < i < 2 ** 63
                                            for i in ids):
            raise InputError("channels", f"channels must be a list of channel ids, got {ids!r}")
        found = {c.pk: c for c in Channel.objects.filter(pk__in=ids)}
        missing = [i for i in ids if i not in found]
        if missing:
            known = ", ".join(str(i) for i in Channel.objects.values_list("pk", flat=True)) or "none yet"
            raise InputError("channels", f"no channel {missing[0]}; channels are ids of existing channels ({known})")
        return list(found.values())

    def _scope(self, scope):
        scope = "" if scope is None else scope
        if not isinstance(scope, str) or len(scope) > SCOPE_MAX:
            raise InputError("scope", f"scope must be text of at most {SCOPE_MAX} characters, got {scope!r}")
        scope = check_text("scope", scope.strip())
        if not scope:
            return ""
        accepted = " or ".join(f"{p}:<{'id' if p in ID_SCOPES else 'name'}>" for p in self.spec.scopes)
        prefix, _, value = scope.partition(":")
        value = value.strip()
        if prefix not in self.spec.scopes or not value or (prefix in ID_SCOPES and not (value.isdigit()
                                                                                       and len(value) <= 12)):
            raise InputError("scope", f"scope of a {self.kind} rule must be empty (everything) or {accepted}, "
                                      f"got {scope!r}")
        return f"{prefix}:{int(value) if prefix in ID_SCOPES else value}"

    def describe(self):
        """The rule's condition in words, for the page and notifications."""
        t, d = self.threshold, self.duration
        words = {
            "gpu_idle": lambda: f"a GPU idle for more than {d} min",
            "node_stale": lambda: f"a node stale for more than {d} min",
            "device_unhealthy": lambda: "a device that reported a critical error (XID, uncorrected ECC, row remap)",
            "idle_spend": lambda: f"idle spend above ${t:g}/h per team (over {d} min)",
            "job_failed": lambda: "a job failed",
            "cluster_unreachable": lambda: f"a cluster Yardstick launches on not answering for more than {d} min",
            "queued_long": lambda: f"a job waiting in the line for devices for more than {d} min",
            "budget": lambda: f"a job at {t:g}% of its budget",
            "reward_drop": lambda: f"reward mean {t:g} below its best for {d} steps",
            "kl_high": lambda: f"KL above {t:g} for {d} steps",
            "entropy_low": lambda: f"entropy below {t:g} for {d} steps",
        }
        text = words[self.kind]()
        return text + (f" ({self.scope})" if self.scope else "")

    def to_dict(self):
        return {"id": self.pk, "name": self.name, "kind": self.kind, "threshold": self.threshold,
                "duration": self.duration, "duration_unit": self.spec.duration_unit, "scope": self.scope,
                "enabled": self.enabled, "description": self.describe(),
                "channels": sorted(c.pk for c in self.channels.all()), "created_at": _iso(self.created_at)}


class AlertQuerySet(models.QuerySet):
    def firing(self):
        return self.filter(state=Alert.State.FIRING)


class Alert(models.Model):
    """One firing of a rule for one subject, from fired_at until resolved_at."""

    class State(models.TextChoices):
        FIRING = "firing"
        RESOLVED = "resolved"

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="alerts")
    subject = models.CharField(max_length=300, help_text='what is in breach: "job:12", "node:gpu-a", ...')
    state = models.CharField(max_length=10, choices=State.choices, default=State.FIRING)
    fired_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    value = models.FloatField(null=True, blank=True, help_text="the figure last measured against the threshold")
    message = models.TextField(default="", blank=True)
    acknowledged_by = models.CharField(max_length=150, blank=True, default="")
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    silenced_until = models.DateTimeField(null=True, blank=True)

    objects = AlertQuerySet.as_manager()

    class Meta:
        ordering = ["-fired_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["rule", "subject"], condition=models.Q(state="firing"),
                                               name="alerts_one_firing_per_subject")]

    def __str__(self):
        return f"alert {self.pk} {self.subject} ({self.state})"

    def is_silenced(self, now=None):
        return self.silenced_until is not None and self.silenced_until > (now or timezone.now())

    def is_quiet(self, now=None):
        """Whether notifications about it are held back: acknowledged, or silenced now."""
        return bool(self.acknowledged_at) or self.is_silenced(now)

    @classmethod
    def fire(cls, rule, subject, value, message, now):
        """Fire `rule` for `subject` unless it is firing already; return the new Alert or None.

        A silence set on the subject's previous alert of this rule carries over while it lasts, so a
        flapping condition stays quiet."""
        previous = cls.objects.filter(rule=rule, subject=subject).order_by("-fired_at", "-id").first()
        silenced = previous.silenced_until if previous and previous.is_silenced(now) else None
        try:
            with transaction.atomic():
                alert = cls.objects.create(rule=rule, subject=subject, fired_at=now, value=value, message=message,
                                           silenced_until=silenced)
                event = AlertEvent.objects.create(alert=alert, kind=AlertEvent.Kind.FIRED, at=now, value=value,
                                                  message=message)
                event.queue_deliveries(now)
        except IntegrityError:  # another evaluator fired it first
            return None
        alert.announce()
        return alert

    def resolve(self, now, message):
        """Resolve this alert if it is firing (claimed by row count); return whether this call did."""
        with transaction.atomic():
            if not Alert.objects.filter(pk=self.pk, state=self.State.FIRING).update(
                    state=self.State.RESOLVED, resolved_at=now):
                return False
            self.refresh_from_db()
            event = AlertEvent.objects.create(alert=self, kind=AlertEvent.Kind.RESOLVED, at=now, value=self.value,
                                              message=message)
            event.queue_deliveries(now)
        self.announce()
        return True

    def acknowledge(self, by, now=None):
        """Acknowledge a firing alert (nothing more is sent about it); return whether this call did."""
        now = now or timezone.now()
        with transaction.atomic():
            if not Alert.objects.filter(pk=self.pk, state=self.State.FIRING, acknowledged_at__isnull=True).update(
                    acknowledged_by=by, acknowledged_at=now):
                return False
            AlertEvent.objects.create(alert=self, kind=AlertEvent.Kind.ACKNOWLEDGED, at=now, by=by,
                                      message=f"acknowledged by {by}")
        self.refresh_from_db()
        self.announce()
        return True

    def ack_refusal(self):
        if self.state != self.State.FIRING:
            return f"alert {self.pk} is resolved; only a firing alert can be acknowledged"
        return f"alert {self.pk} was already acknowledged by {self.acknowledged_by}"

    def silence(self, minutes, by, now=None):
        """Send nothing about this alert (and the next firings of its rule for its subject) for `minutes`."""
        minutes = _number("minutes", minutes, 1, SILENCE_MAX_MIN, integer=True, accepted="a whole number of minutes")
        now = now or timezone.now()
        until = now + timedelta(minutes=minutes)
        with transaction.atomic():
            Alert.objects.filter(pk=self.pk).update(silenced_until=until)
            AlertEvent.objects.create(alert=self, kind=AlertEvent.Kind.SILENCED, at=now, by=by,
                                      message=f"silenced by {by} for {minutes} min, until {until:%Y-%m-%d %H:%M} UTC")
        self.refresh_from_db()
        self.announce()
        return until

    def announce(self):
        publish(TOPIC, "alert", self.to_dict())

    @property
    def path(self):
        """The page of what is in breach (subject_path)."""
        return subject_path(self.subject)

    @property
    def url(self):
        """That page's whole address, from YARDSTICK_URL (which `up` gives every part it starts); None without it."""
        return f"{settings.YARDSTICK_URL}{self.path}" if settings.YARDSTICK_URL else None

    def to_dict(self, now=None):
        return {
            "id": self.pk, "rule": self.rule_id, "rule_name": self.rule.name, "kind": self.rule.kind,
            "subject": self.subject, "path": self.path, "url": self.url, "state": self.state, "fired_at": _iso(self.fired_at),
            "resolved_at": _iso(self.resolved_at), "value": self.value, "message": self.message,
            "acknowledged_by": self.acknowledged_by, "acknowledged_at": _iso(self.acknowledged_at),
            "silenced_until": _iso(self.silenced_until), "silenced": self.is_silenced(now),
        }


# The page of each kind of subject; a subject of no page goes to the Alerts page.
_SUBJECT_PAGES = {"job": "/jobs/{}", "node": "/nodes/{}", "sweep": "/sweeps/{}", "cluster": "/clusters/{}",
                  "campaign": "/campaigns/{}"}


def subject_path(subject):
    """The path of the page that shows `subject`: "job:12" -> /jobs/12, "node:gpu-a" and "device:gpu-a/0" -> the
    node's page, "sweep:7:stalled" -> /sweeps/7, "team:research" -> the Costs page by team; else /alerts."""
    kind, _, rest = subject.partition(":")
    if kind == "device":
        kind, rest = "node", rest.rpartition("/")[0]
    elif kind == "sweep":
        rest = rest.partition(":")[0]
    elif kind == "team":
        return "/costs?group=team"
    pattern = _SUBJECT_PAGES.get(kind)
    if pattern is None or not rest:
        return "/alerts"
    return pattern.format(quote(rest, safe="/" if kind == "node" else ""))


class AlertEvent(models.Model):
    """One entry in an alert's history."""

    class Kind(models.TextChoices):
        FIRED = "fired"
        RESOLVED = "resolved"
        ACKNOWLEDGED = "acknowledged"
        SILENCED = "silenced"

    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    at = models.DateTimeField()
    value = models.FloatField(null=True, blank=True)
    message = models.TextField(default="", blank=True)
    by = models.CharField(max_length=150, blank=True, default="")

    class Meta:
        ordering = ["at", "id"]

    NOTIFIED = (Kind.FIRED, Kind.RESOLVED)

    def queue_deliveries(self, now):
        """A Delivery to each of the rule's channels, due now; none while the alert is quiet (see Alert.is_quiet)."""
        if self.kind not in self.NOTIFIED or self.alert.is_quiet(now):
            return []
        return Delivery.objects.bulk_create([Delivery(event=self, channel=c, next_attempt_at=now)
                                             for c in self.alert.rule.channels.all()])

    def text(self):
        """The one line a notification says."""
        alert = self.alert
        head = "FIRING" if self.kind == self.Kind.FIRED else self.kind.upper()
        return f"[{head}] {alert.rule.name}: {self.message or alert.message}"

    def text_with_link(self):
        """The line and the page to open, where the control plane's address is known (Slack, email)."""
        url = self.alert.url
        return f"{self.text()} {url}" if url else self.text()

    def to_dict(self):
        return {"id": self.pk, "alert": self.alert_id, "kind": self.kind, "at": _iso(self.at), "value": self.value,
                "message": self.message, "by": self.by}


class Delivery(models.Model):
    """One notification of one event to one channel, retried with back-off until sent or given up."""

    class State(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"  # gave up after MAX_ATTEMPTS
        CANCELLED = "cancelled"  # the alert was acknowledged or silenced before it went out

    event = models.ForeignKey(AlertEvent, on_delete=models.CASCADE, related_name="deliveries")
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="deliveries")
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    attempts = models.IntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(default="", blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["state", "next_attempt_at"], name="alerts_delivery_due")]

    def to_dict(self):
        return {"id": self.pk, "event": self.event_id, "alert": self.event.alert_id, "event_kind": self.event.kind,
                "channel": self.channel.name, "channel_kind": self.channel.kind, "state": self.state,
                "attempts": self.attempts, "next_attempt_at": _iso(self.next_attempt_at),
                "last_attempt_at": _iso(self.last_attempt_at), "last_error": self.last_error,
                "delivered_at": _iso(self.delivered_at)}
