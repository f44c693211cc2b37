from django.db import migrations, models


class Migration(migrations.Migration):
    """The pg_snapshot each attribution run takes before it reads: the next reads only the rollups written
    since (collector migration 0007 says which transaction wrote each)."""

    dependencies = [
        ('collector', '0007_rollup_written'),
        ('costs', '0002_allocation_energy_scope'),
    ]

    operations = [
        migrations.AddField(
            model_name='attributionstate',
            name='rollups_seen',
            field=models.TextField(null=True),
        ),
    ]
