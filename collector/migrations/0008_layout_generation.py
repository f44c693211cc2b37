from django.db import migrations

from collector.agent import schema


class Migration(migrations.Migration):
    """A one-row number that moves on whenever the fleet's layout changes (schema.LAYOUT_SQL), so the fleet page and
    the live publisher keep the layout they read and check one row each time instead of reading every device."""

    dependencies = [("collector", "0007_rollup_written")]

    operations = [migrations.RunSQL(schema.LAYOUT_SQL, schema.LAYOUT_DROP_SQL)]
