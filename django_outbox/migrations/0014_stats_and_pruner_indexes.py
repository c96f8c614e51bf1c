# An index for the pruner (finished jobs that others depend on), written only by the few jobs
# in its condition. (Halted jobs by queue, which stats reads too, came with 0011.)

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_outbox", "0013_admin_indexes"),
    ]

    operations = [
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
