# Jobs workers report their devices (a job asking for one none has is refused at start), and a job that
# failed for a missing device says why it cannot be resumed (a resume would fail again).

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('trainer', '0004_job_budget_micro_usd'),
    ]

    operations = [
        migrations.CreateModel(
            name='Worker',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(help_text='Celery node name, e.g. "jobs@host-a"', max_length=255, unique=True)),
                ('host', models.CharField(help_text='socket.gethostname() of the worker', max_length=255)),
                ('queues', models.JSONField(default=list)),
                ('devices', models.JSONField(default=list, help_text='what torch sees there, e.g. ["cpu", "cuda:0"]')),
                ('seen_at', models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={
                'ordering': ['name'],
            },
        ),
        migrations.AddField(
            model_name='job',
            name='not_resumable_reason',
            field=models.TextField(blank=True, default=''),
        ),
    ]
