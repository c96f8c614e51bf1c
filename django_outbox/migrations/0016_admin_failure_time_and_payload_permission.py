# The admin: failed lists by failure time (the failed-job indexes and the finished-job index
# end in (finished_at, id), the order and the pages by key of those lists), and the permission
# to read payloads and tracebacks.


from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_outbox', '0015_relay'),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='job',
            options={'ordering': ['-id'], 'permissions': [('view_job_payload', 'Can view job payloads and tracebacks')], 'verbose_name': 'job', 'verbose_name_plural': 'jobs'},
        ),
        migrations.RemoveIndex(
            model_name='job',
            name='outbox_job_finished',
        ),
        migrations.RemoveIndex(
            model_name='job',
            name='outbox_job_failed_task',
        ),
        migrations.RemoveIndex(
            model_name='job',
            name='outbox_job_failed_queue',
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(models.F('task_name'), models.F('finished_at'), models.F('id'), condition=models.Q(('status', 'failed')), name='outbox_job_failed_task'),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(models.F('queue'), models.F('finished_at'), models.F('id'), condition=models.Q(('status', 'failed')), name='outbox_job_failed_queue'),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(models.F('status'), models.F('finished_at'), models.F('id'), condition=models.Q(('status__in', ('succeeded', 'failed', 'cancelled'))), name='outbox_job_finished'),
        ),
    ]
