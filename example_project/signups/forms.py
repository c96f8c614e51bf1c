from typing import Any

from django import forms
from django.contrib.auth import get_user_model


class SignupForm(forms.ModelForm):
    """A username and an email address; the account gets no usable password."""

    class Meta:
        model = get_user_model()
        fields = ("username", "email")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["email"].required = True
