# Files runs upload through MLflow's artifact API (tracking/artifacts.py keeps the bytes).

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tracking', '0001_initial'),
    ]

    operations = [
        migrations.CreateModel(
            name='Artifact',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('path', models.CharField(help_text="relative to the run's artifact root, '/'-separated", max_length=1000)),
                ('size_bytes', models.BigIntegerField()),
                ('content_type', models.CharField(blank=True, default='', max_length=200)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('run', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='artifacts', to='tracking.run')),
            ],
            options={
                'ordering': ['run', 'path'],
                'constraints': [models.UniqueConstraint(fields=('run', 'path'), name='tracking_artifact_unique')],
            },
        ),
    ]
