from django.db import migrations

from collector.agent import schema


class Migration(migrations.Migration):
    """What newer GPUs report beside utilization and GPU power (module and memory power, module energy, tensor
    activity, SM occupancy, NVLink throughput, clock event reasons, power limit), on samples and rollups; each
    device's architecture, MIG mode and power scopes. The models are unmanaged: their fields are in
    collector/models.py. Going back leaves the columns in place (older code never reads them) and makes the writer's row type as it was."""

    dependencies = [("collector", "0003_holder_lineage")]

    operations = [migrations.RunSQL(schema.EXTENDED_SQL, schema.EXTENDED_DROP_SQL)]
