# The admin: a task's list without a status filter along (task_name, id), as a queue's is along
# outbox_job_queue (migration 0021). Built while the table is locked for writes (about two
# seconds per million jobs on PostgreSQL).

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_outbox", "0021_admin_queue_and_error_indexes"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="job",
            index=models.Index(fields=["task_name", "id"], name="outbox_job_task"),
        ),
    ]
