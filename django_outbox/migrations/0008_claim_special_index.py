"""The partial index that tells a worker whether a full claim is needed (ClaimPolicy)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_outbox', '0007_job_dependencies'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='job',
            index=models.Index(models.F('run_at'), condition=models.Q(('status__in', ('ready', 'retrying')), models.Q(('lock_key__isnull', False), ('has_dependencies', True), _connector='OR')), name='outbox_job_claim_special'),
        ),
    ]
