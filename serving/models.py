"""Serving deployments: a model served by an inference engine on a node's GPUs (docs/serving.md).

An admin registers a `Deployment` (name, team, engine or "auto", the engine's metrics URL, the model it serves, the
node whose collector agent reads it). The agent reads the page of its `target` (collector.models.ScrapeTarget, kept in
step by `register`) and stores what its counters gained (collector.models.ServedCount); its dollars will come from the
GPUs it holds, priced as a job's.
Registration checks every field and stores nothing when one is wrong (InputError names it).
"""

from urllib.parse import urlsplit

from django.conf import settings
from django.db import models, transaction
from django.db.models.signals import post_delete
from django.dispatch import receiver
from django.utils import timezone

from collector.agent.engines import ENGINES
from collector.models import ScrapeTarget, ServedCount
from trainer.models import TEAM_MAX
from yardstick.inputs import InputError, text_problem

NAME_MAX = 100
MODEL_MAX = 500
URL_MAX = 1000
NODE_MAX = 255
FIELDS = ("name", "team", "engine", "metrics_url", "model", "node", "description")
AUTO = "auto"


class Deployment(models.Model):
    name = models.CharField(max_length=NAME_MAX, unique=True)
    team = models.CharField(max_length=TEAM_MAX, db_index=True, help_text="who pays for it")
    engine = models.CharField(max_length=20, help_text="an engine of collector.agent.engines.ENGINES, or auto: found from "
                                                       "the metric names its page gives")
    metrics_url = models.CharField(max_length=URL_MAX, help_text="the engine's Prometheus page, http(s)")
    model = models.CharField(max_length=MODEL_MAX, blank=True, default="",
                             help_text="the model it serves, as the engine names it (vLLM's model_name); empty: "
                                       "every model its page counts")
    node = models.CharField(max_length=NODE_MAX, help_text="the node it runs on, whose collector agent reads it")
    description = models.CharField(max_length=2000, blank=True, default="")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # What the node's agent reads (collector.models.ScrapeTarget): kept in step by register.
    target = models.OneToOneField(ScrapeTarget, null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="deployment")

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return f"deployment {self.name}"

    @classmethod
    def register(cls, raw, user=None):
        """Create the deployment `raw` names (FIELDS) or change it; return (deployment, "created" | "updated").
        InputError names the first bad field; nothing is stored then."""
        if not isinstance(raw, dict):
            raise InputError("body", f"a deployment is an object of {', '.join(FIELDS)}")
        unknown = sorted(set(raw) - set(FIELDS))
        if unknown:
            raise InputError(unknown[0], f"a deployment has no field {unknown[0]!r}; its fields are "
                                         f"{', '.join(FIELDS)}")
        clean = {
            "team": _text("team", raw.get("team"), TEAM_MAX, required=True),
            "engine": clean_engine(raw.get("engine")),
            "metrics_url": clean_metrics_url(raw.get("metrics_url")),
            "model": _text("model", raw.get("model"), MODEL_MAX),
            "node": clean_node(raw.get("node")),
            "description": _text("description", raw.get("description"), 2000),
        }
        name = clean_name(raw.get("name"))
        with transaction.atomic():
            row = cls.objects.select_for_update().filter(name=name).first()
            outcome = "updated" if row else "created"
            row = row or cls(name=name, created_by=user)
            for field, value in clean.items():
                setattr(row, field, value)
            row.target = ScrapeTarget.put(name, clean["node"], clean["engine"], clean["metrics_url"], clean["model"])
            row.save()
        return row, outcome

    def to_dict(self, counted=None):
        """The deployment and, given `counted` (ServedCount.totals by target id), what its agent has read."""
        t = self.target
        out = {"name": self.name, "team": self.team, "engine": self.engine, "metrics_url": self.metrics_url,
               "model": self.model, "node": self.node, "description": self.description,
               "created_by": self.created_by.username if self.created_by_id else None,
               "created_at": self.created_at.isoformat(),
               "read_at": _iso(t and t.read_at), "engine_read": t.engine_read if t else "",
               "unreadable_since": _iso(t and t.unreadable_since), "unreadable": (t.unreadable if t else "") or None}
        if counted is not None:
            out["counted"] = counted.get(self.target_id, ServedCount.empty())
        return out

    @property
    def state(self):
        """What the page says of its metrics: "not read yet", "read at 14:02", "unreadable since 14:02: ..."."""
        t = self.target
        if t is not None and t.unreadable_since is not None:
            return f"metrics unreadable since {_clock(t.unreadable_since)}: {t.unreadable}"
        if t is None or t.read_at is None:
            return f"not read yet: the agent on node {self.node} reads it every few seconds once it runs"
        return f"read at {_clock(t.read_at)}"


@receiver(post_delete, sender=Deployment)
def _read_no_more(sender, instance, **kwargs):
    """A deleted deployment (one, or a queryset's) is read no more, and what was read of it goes with it."""
    if instance.target_id is not None:
        ScrapeTarget.objects.filter(pk=instance.target_id).delete()


def _iso(ts):
    return ts.isoformat() if ts else None


def _clock(ts):
    return timezone.localtime(ts).strftime("%Y-%m-%d %H:%M")


def clean_name(value):
    if not isinstance(value, str) or not value or len(value) > NAME_MAX or not all(
            c.isascii() and (c.isalnum() and not c.isupper() or c in "._-") for c in value) or not value[0].isalnum():
        raise InputError("name", f"name must be 1 to {NAME_MAX} lower-case letters, digits, '.', '_' or '-' "
                                 f"(starting with a letter or digit), got {_shown(value)}")
    return value


def clean_engine(value):
    if value in (None, ""):
        return AUTO
    if value != AUTO and value not in ENGINES:
        accepted = ", ".join([AUTO, *(f"{k} ({v})" for k, v in ENGINES.items())])
        raise InputError("engine", f"engine must be one of {accepted}; got {_shown(value)}")
    return value


def clean_metrics_url(value):
    """http(s)://host[:port][/path]: the engine's Prometheus page (vLLM's is http://host:8000/metrics)."""
    text = _text("metrics_url", value, URL_MAX, required=True)
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as err:
        raise InputError("metrics_url", f"metrics_url is not a URL ({err}); give http(s)://host:port/metrics, got "
                                        f"{_shown(value)}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError("metrics_url", f"metrics_url must be an http(s) URL such as http://gpu-7:8000/metrics (the "
                                        f"engine's Prometheus page), got {_shown(value)}")
    if port is not None and not 1 <= port <= 65535:
        raise InputError("metrics_url", f"metrics_url's port must be from 1 to 65535, got {port}")
    if parts.username or parts.password:
        raise InputError("metrics_url", "metrics_url must not hold a user or password")
    return text


def clean_node(value):
    text = _text("node", value, NODE_MAX, required=True)
    if any(c.isspace() for c in text):
        raise InputError("node", f"node must be a node's name as its collector reports it (no spaces), got "
                                 f"{_shown(value)}")
    return text


def _text(field, value, max_len, required=False):
    if value is None or value == "":
        if required:
            raise InputError(field, f"{field} is required: text of at most {max_len} characters")
        return ""
    if not isinstance(value, str):
        raise InputError(field, f"{field} must be text of at most {max_len} characters, got a "
                                f"{type(value).__name__}")
    value = value.strip()
    problem = text_problem(value)
    if problem:
        raise InputError(field, f"{field} {problem}")
    if len(value) > max_len:
        raise InputError(field, f"{field} must be at most {max_len} characters, got {len(value):,}")
    if required and not value:
        raise InputError(field, f"{field} is required: text of at most {max_len} characters")
    return value


def _shown(value):
    """A bad value as an error message repeats it: cut to 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
