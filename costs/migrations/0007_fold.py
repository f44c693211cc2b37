from django.db import migrations, models

from costs.models import TAKE_SQL, day_trigger

# Before the fold: deleting allocations always took their sums away from their day.
UNFOLDING_TAKE_SQL = day_trigger("costs_usage_day_take", "gone", "-")


class Migration(migrations.Migration):

    dependencies = [
        ('costs', '0006_allocation_indexes_covered'),
    ]

    operations = [
        migrations.AddField(
            model_name='attributionstate',
            name='folded_before',
            field=models.DateField(null=True),
        ),
        migrations.RunSQL(TAKE_SQL, UNFOLDING_TAKE_SQL),
    ]
