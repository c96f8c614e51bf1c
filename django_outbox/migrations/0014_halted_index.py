# The halted jobs by queue, for django_outbox.stats (issue 9).

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_outbox", "0010_job_return_value"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                models.F("queue"),
                condition=models.Q(("status", "halted")),
                name="outbox_job_halted",
            ),
        ),
    ]
