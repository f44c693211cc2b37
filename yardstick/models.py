import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone


def hash_token(token):
    """What is stored of an API token: its SHA-256, in hex."""
    return hashlib.sha256(token.encode()).hexdigest()


class ApiToken(models.Model):
    """A bearer token for scripts. Only its SHA-256 is stored; the token is shown once."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, default="cli")
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=8, help_text="first characters, to tell tokens apart")
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked = models.BooleanField(default=False)
    # A launched job's token (launch/kind.py) writes this one MLflow run and nothing else; "" for any run.
    run_id = models.CharField(max_length=32, blank=True, default="",
                              help_text="the one MLflow run this token may write; empty: no such limit")

    def __str__(self):
        return f"{self.prefix}… ({self.user}, {self.name})"

    @classmethod
    def issue(cls, user, name="cli", run_id=""):
        """A new token of `user` (limited to writing MLflow run `run_id` when given); (token, row)."""
        token = "ys_" + secrets.token_urlsafe(32)
        row = cls.objects.create(user=user, name=name, key_hash=hash_token(token), prefix=token[:8], run_id=run_id)
        return token, row

    @classmethod
    def authenticate(cls, token):
        """Return the active user owning `token`, or None when it is unknown, revoked or inactive."""
        row = cls.find(token)
        return None if row is None else row.user

    @classmethod
    def find(cls, token):
        """The live row of `token` (its user loaded), or None when it is unknown, revoked or its user inactive."""
        row = (
            cls.objects.select_related("user")
            .filter(key_hash=hash_token(token), revoked=False, user__is_active=True)
            .first()
        )
        if row is None:
            return None
        now = timezone.now()
        # Write at most once a minute per token, not on every request.
        if row.last_used_at is None or (now - row.last_used_at).total_seconds() > 60:
            cls.objects.filter(pk=row.pk).update(last_used_at=now)
        return row


class Heartbeat(models.Model):
    """The last time a periodic component (beat) proved it was alive."""

    name = models.CharField(max_length=50, primary_key=True)
    at = models.DateTimeField()

    @classmethod
    def beat(cls, name):
        cls.objects.update_or_create(name=name, defaults={"at": timezone.now()})

    @classmethod
    def age_s(cls, name):
        """Seconds since the last beat of `name`, or None when it never beat."""
        row = cls.objects.filter(name=name).first()
        return None if row is None else (timezone.now() - row.at).total_seconds()
