from django.db import models


class Order(models.Model):
    """An order of the docs' shop."""

    email = models.EmailField()
    total = models.DecimalField(max_digits=10, decimal_places=2, default=0)
    paid = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"order {self.pk}"


class Article(models.Model):
    """An article of the docs' blog, published once an editor approves it."""

    title = models.CharField(max_length=200)
    published = models.BooleanField(default=False)
    approved_by = models.CharField(max_length=150, blank=True)

    def __str__(self) -> str:
        return self.title


class SentReceipt(models.Model):
    """What the docs' idempotent receipt task has sent, by job id."""

    job_id = models.BigIntegerField(unique=True)
    order_id = models.BigIntegerField()

    def __str__(self) -> str:
        return f"receipt of job {self.job_id}"
