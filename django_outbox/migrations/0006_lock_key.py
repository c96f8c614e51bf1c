"""enqueue(lock=...): the key, and the index the claim checks a key's line with."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_outbox', '0005_job_context'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='lock_key',
            field=models.CharField(blank=True, max_length=255, null=True, verbose_name='lock key'),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(models.F('lock_key'), models.OrderBy(models.F('priority'), descending=True), models.F('id'), condition=models.Q(('lock_key__isnull', False), ('status__in', ('ready', 'retrying', 'running', 'halted'))), name='outbox_job_lock_line'),
        ),
    ]
