# The narrow role of the tokens outside training runs report with (MLflow tracking API only).
from django.db import migrations


def create_reporter(apps, schema_editor):
    apps.get_model("auth", "Group").objects.get_or_create(name="reporter")


def remove_reporter(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name="reporter").delete()


class Migration(migrations.Migration):
    dependencies = [("yardstick", "0002_roles")]
    operations = [migrations.RunPython(create_reporter, remove_reporter)]
