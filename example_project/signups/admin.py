from django.contrib import admin

from .models import WelcomeEmail


@admin.register(WelcomeEmail)
class WelcomeEmailAdmin(admin.ModelAdmin):
    list_display = ("user", "attempt", "job", "sent_at")
    list_select_related = ("user", "job")
    readonly_fields = ("user", "job", "attempt", "sent_at")
