from django.db import migrations, models


class Migration(migrations.Migration):
    """The stints of the lookback each attribution run saw: the next recomputes only those it did not."""

    dependencies = [
        ('costs', '0004_daily_usage'),
    ]

    operations = [
        migrations.AddField(
            model_name='attributionstate',
            name='recent_stints',
            field=models.JSONField(default=list),
        ),
    ]
