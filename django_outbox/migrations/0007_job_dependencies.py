"""enqueue(depends_on=...): the dependencies of a job; flags for the claim and the pruner."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_outbox', '0006_lock_key'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='has_dependencies',
            field=models.BooleanField(db_default=False, default=False, verbose_name='has dependencies'),
        ),
        migrations.AddField(
            model_name='job',
            name='has_dependents',
            field=models.BooleanField(db_default=False, default=False, verbose_name='has dependents'),
        ),
        migrations.CreateModel(
            name='JobDependency',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('depends_on', models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name='dependents', to='django_outbox.job')),
                ('job', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='dependencies', to='django_outbox.job')),
            ],
            options={
                'verbose_name': 'job dependency',
                'verbose_name_plural': 'job dependencies',
                'constraints': [models.UniqueConstraint(fields=('job', 'depends_on'), name='outbox_dependency_once')],
            },
        ),
    ]
