from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from yardstick.auth import REPORTER, ROLES, create_token, role_of

ACCOUNT_ROLES = (*ROLES, REPORTER)


class Command(BaseCommand):
    help = ("Create an API token for USER and print it once (send it as 'Authorization: Bearer <token>'; "
            "an MLflow client sends MLFLOW_TRACKING_TOKEN so).")

    def add_arguments(self, parser):
        parser.add_argument("user", help="username of an existing user (or a new one, with --create)")
        parser.add_argument("--name", default="cli", help="a label to tell tokens apart (default: cli)")
        parser.add_argument("--create", metavar="ROLE",
                            help=f"create USER first, holding ROLE ({', '.join(ACCOUNT_ROLES)}), with no password: "
                                 f"an account for scripts, e.g. --create {REPORTER} for training machines")

    def handle(self, user, name, create=None, **options):
        User = get_user_model()
        exists = User.objects.filter(username=user).exists()
        if create is not None:
            if create not in ACCOUNT_ROLES:
                raise CommandError(f"--create takes a role: one of {', '.join(ACCOUNT_ROLES)}; got {create!r}")
            if exists:
                raise CommandError(f"a user named {user!r} already exists (role: {role_of(User.objects.get(username=user)) or 'none'}); "
                                   "leave out --create to give it another token")
            with transaction.atomic():
                account = User.objects.create_user(user)  # no usable password: it logs in by token only
                account.groups.add(Group.objects.get(name=create))
        elif not exists:
            known = ", ".join(User.objects.order_by("username").values_list("username", flat=True)[:10])
            raise CommandError(f"no user named {user!r}; existing users: {known or 'none'} "
                               f"(--create ROLE makes one)")
        token, row = create_token(user, name)
        role = role_of(row.user)
        if role is None:
            self.stderr.write(f"warning: {user} holds no role ({', '.join(ACCOUNT_ROLES)}); the token can read "
                              "nothing yet")
        self.stdout.write(token)
