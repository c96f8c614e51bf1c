"""enqueue(unique_key=...): the key, and the index its check looks it up by."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_outbox', '0003_cancel_halt_resume'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='unique_key',
            field=models.CharField(blank=True, max_length=255, null=True, verbose_name='unique key'),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(models.F('unique_key'), condition=models.Q(('unique_key__isnull', False)), name='outbox_job_unique_key'),
        ),
    ]
