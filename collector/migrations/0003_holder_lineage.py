import django.contrib.postgres.fields
from django.db import migrations, models

from collector.agent import schema


class Migration(migrations.Migration):
    """Each device holder's ancestor PIDs and launcher job ids: training runs reported through MLflow are
    matched to the devices their processes hold (tracking/matching.py)."""

    dependencies = [("collector", "0002_rollup_watermark")]

    operations = [
        migrations.RunSQL(
            schema.LINEAGE_SQL,
            schema.LINEAGE_DROP_SQL,
            state_operations=[
                migrations.AddField(
                    model_name="deviceholder",
                    name="ancestor_pids",
                    field=django.contrib.postgres.fields.ArrayField(base_field=models.IntegerField(), default=list, size=None),
                ),
                migrations.AddField(
                    model_name="deviceholder",
                    name="launcher_ids",
                    field=models.JSONField(default=dict),
                ),
            ],
        )
    ]
