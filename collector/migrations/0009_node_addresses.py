from django.db import migrations

from collector.agent import schema


class Migration(migrations.Migration):
    """Each node's IP addresses as its agent reports them (schema.ADDRESSES_SQL), so a cluster's node named by its
    address (Ray names nodes by IP) is tied to the agent's node of another name, and its jobs are charged. The
    model is unmanaged: the field is in collector/models.py."""

    dependencies = [("collector", "0008_layout_generation")]

    operations = [migrations.RunSQL(schema.ADDRESSES_SQL, schema.ADDRESSES_DROP_SQL)]
