"""OUTBOX["CONTEXT"]: the context variables captured with each job."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_outbox', '0004_unique_key'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='context',
            field=models.JSONField(blank=True, null=True, verbose_name='context'),
        ),
    ]
