from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from yardstick.auth import create_token, role_of


class Command(BaseCommand):
    help = "Create an API token for USER and print it once (send it as 'Authorization: Bearer <token>')."

    def add_arguments(self, parser):
        parser.add_argument("user", help="username of an existing user")
        parser.add_argument("--name", default="cli", help="a label to tell tokens apart (default: cli)")

    def handle(self, user, name, **options):
        User = get_user_model()
        if not User.objects.filter(username=user).exists():
            known = ", ".join(User.objects.order_by("username").values_list("username", flat=True)[:10])
            raise CommandError(f"no user named {user!r}; existing users: {known or 'none'}")
        token, row = create_token(user, name)
        role = role_of(row.user)
        if role is None:
            self.stderr.write(f"warning: {user} holds no role (viewer, operator, admin); the token can read nothing yet")
        self.stdout.write(token)
