"""Cancelled and halted jobs: their statuses, the cancel request, the halt reason, resume data."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_outbox', '0002_finished_index_and_notify'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='job',
            name='outbox_job_status_valid',
        ),
        migrations.RemoveIndex(
            model_name='job',
            name='outbox_job_finished',
        ),
        migrations.AddField(
            model_name='job',
            name='cancel_requested',
            field=models.BooleanField(db_default=False, default=False, verbose_name='cancel requested'),
        ),
        migrations.AddField(
            model_name='job',
            name='halt_reason',
            field=models.TextField(blank=True, db_default='', default='', verbose_name='halt reason'),
        ),
        migrations.AddField(
            model_name='job',
            name='resume_data',
            field=models.JSONField(blank=True, null=True, verbose_name='resume data'),
        ),
        migrations.AlterField(
            model_name='job',
            name='status',
            field=models.CharField(choices=[('ready', 'Ready'), ('running', 'Running'), ('retrying', 'Retrying'), ('succeeded', 'Succeeded'), ('failed', 'Failed'), ('halted', 'Halted'), ('cancelled', 'Cancelled')], default='ready', max_length=16, verbose_name='status'),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(models.F('status'), models.F('finished_at'), condition=models.Q(('status__in', ('succeeded', 'failed', 'cancelled'))), name='outbox_job_finished'),
        ),
        migrations.AddConstraint(
            model_name='job',
            constraint=models.CheckConstraint(condition=models.Q(('status__in', ['ready', 'running', 'retrying', 'succeeded', 'failed', 'halted', 'cancelled'])), name='outbox_job_status_valid'),
        ),
    ]
