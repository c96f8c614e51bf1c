"""The Django admin: the job list and pages, their actions, and the dashboard.

May import anything below it (the base modules, ``db``, ``jobs``, ``tasks``, ``cron``,
``stats``); never the worker's engine or the commands.
"""

from django.contrib import admin

from ..models import Dashboard, Job, Message
from ..signals import jobs_pruned
from .dashboard import DashboardAdmin
from .history import forget_pruned_jobs
from .job_admin import JobAdmin
from .message_admin import MessageAdmin

admin.site.register(Job, JobAdmin)
admin.site.register(Dashboard, DashboardAdmin)
admin.site.register(Message, MessageAdmin)
jobs_pruned.connect(forget_pruned_jobs, dispatch_uid="django_outbox.admin.forget_pruned_jobs")
