import django.db.models.deletion
from django.db import migrations, models

from costs.models import DAILY_DROP_SQL, DAILY_SQL


class Migration(migrations.Migration):
    """The allocations summed per device and day (DailyUsage), kept by triggers on costs_allocation, so the
    figures read a row per device and day instead of one per minute. The backfill sums what was allocated
    before."""

    dependencies = [
        ('costs', '0003_attribution_rollups_seen'),
        ('trainer', '0010_alter_job_source'),
    ]

    operations = [
        migrations.CreateModel(
            name='DailyUsage',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('day', models.DateField()),
                ('team', models.CharField(max_length=100)),
                ('minutes', models.IntegerField()),
                ('device_s', models.DecimalField(decimal_places=15, max_digits=30)),
                ('energy_j', models.DecimalField(decimal_places=15, max_digits=30)),
                ('from_counter', models.IntegerField()),
                ('from_power', models.IntegerField()),
                ('from_mixed', models.IntegerField()),
                ('from_none', models.IntegerField()),
                ('scope_device', models.IntegerField()),
                ('scope_module', models.IntegerField()),
                ('scope_mixed', models.IntegerField()),
                ('scope_none', models.IntegerField()),
                ('scope_in_module', models.IntegerField()),
                ('device', models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='collector.device')),
                ('job', models.ForeignKey(db_constraint=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='trainer.job')),
            ],
            options={
                'db_table': 'costs_usage_day',
                'indexes': [models.Index(fields=['day'], name='costs_usage_day_day'), models.Index(fields=['job', 'day'], name='costs_usage_day_job')],
                'constraints': [models.UniqueConstraint(fields=('device', 'day', 'job', 'team'), name='costs_usage_day_unique', nulls_distinct=False)],
            },
        ),
        migrations.RunSQL(DAILY_SQL, DAILY_DROP_SQL),
    ]
