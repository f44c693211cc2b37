# Budgets to the micro-dollar: a $0.001 budget was stored as $0.00 and stopped its job at once.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('trainer', '0003_job_phase'),
    ]

    operations = [
        migrations.AlterField(
            model_name='job',
            name='budget_usd',
            field=models.DecimalField(blank=True, decimal_places=6, max_digits=16, null=True),
        ),
    ]
