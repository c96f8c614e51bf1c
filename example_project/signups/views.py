from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from django_outbox.models import Job

from .forms import SignupForm
from .services import sign_up
from .tasks import send_welcome_email


def signup(request: HttpRequest) -> HttpResponse:
    """Show the signup form; on a valid POST, sign the user up and come back here."""
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user, job = sign_up(form.cleaned_data["username"], form.cleaned_data["email"])
        messages.success(
            request,
            f"Signed up {user.get_username()}. Welcome email queued as job #{job.pk}; "
            "run `python example_project/manage.py run_outbox_worker` to send it.",
        )
        return redirect("signup")
    jobs = Job.objects.filter(task_name=send_welcome_email.name)[:10]
    return render(request, "signups/signup.html", {"form": form, "jobs": jobs})
