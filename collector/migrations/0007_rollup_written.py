from django.db import migrations

from collector.agent import schema


class Migration(migrations.Migration):
    """Each 1-minute rollup says which transaction last wrote it (schema.WRITTEN_SQL), so cost attribution
    reads only the rollups written since its last run instead of every device's recent minutes. Existing rows
    keep NULL (written before any run that follows them); the index starts empty."""

    dependencies = [("collector", "0006_reason_rollups")]

    operations = [migrations.RunSQL(schema.WRITTEN_SQL, schema.WRITTEN_DROP_SQL)]
