from django.db import models


class Note(models.Model):
    """Rows that test handlers write, to show whether their transaction committed."""

    text = models.CharField(max_length=200)
    job_id = models.BigIntegerField(null=True)

    def __str__(self) -> str:
        return self.text
