from django.db import migrations

from collector.agent import schema


class Migration(migrations.Migration):
    """The roll-up watermark: live samples no longer mark (device, hour) pending one batch at a time."""

    dependencies = [("collector", "0001_initial")]

    operations = [migrations.RunSQL(schema.WATERMARK_SQL, schema.WATERMARK_DROP_SQL)]
