from django.db import migrations, models

from collector.agent import schema


class Migration(migrations.Migration):
    """What a device reported about its health (XID errors, uncorrected ECC errors, row remapping), as events."""

    dependencies = [("collector", "0004_nvml_extended")]

    operations = [
        migrations.RunSQL(
            schema.HEALTH_SQL,
            schema.HEALTH_DROP_SQL,
            state_operations=[
                migrations.CreateModel(
                    name="DeviceEvent",
                    fields=[
                        ("pk", models.CompositePrimaryKey("device", "ts", "kind", "code", blank=True, editable=False,
                                                          primary_key=True, serialize=False)),
                        ("ts", models.DateTimeField()),
                        ("kind", models.TextField()),
                        ("code", models.BigIntegerField(default=0)),
                        ("detail", models.TextField(blank=True, default="")),
                        ("critical", models.BooleanField(default=False)),
                    ],
                    options={"db_table": "telemetry_device_event", "ordering": ["-ts"], "managed": False},
                ),
            ],
        )
    ]
