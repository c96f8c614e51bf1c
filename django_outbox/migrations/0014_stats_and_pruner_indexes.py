# Indexes for django_outbox.stats (halted jobs by queue) and the pruner (finished jobs that
# others depend on); each is written only by the few jobs in its condition (issue 9).

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_outbox", "0013_admin_indexes"),
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
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                models.F("status"),
                models.F("finished_at"),
                condition=models.Q(
                    ("has_dependents", True), ("status__in", ("succeeded", "failed", "cancelled"))
                ),
                name="outbox_job_finished_parents",
            ),
        ),
    ]
