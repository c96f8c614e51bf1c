from django.contrib import admin
from django.urls import path

from signups import views

urlpatterns = [
    path("", views.signup, name="signup"),
    path("admin/", admin.site.urls),
]
