from django.db import migrations

from collector.agent import schema


class Migration(migrations.Migration):
    """The rollups count the samples held down by each group of clocks event reasons (power cap, thermal, sync
    boost, HW slowdown) and keep the lowest power limit, for the node page's timeline of why clocks were held
    down. Going back leaves the columns (older code never reads them)."""

    dependencies = [("collector", "0005_device_events")]

    operations = [migrations.RunSQL(schema.REASONS_SQL, migrations.RunSQL.noop)]
