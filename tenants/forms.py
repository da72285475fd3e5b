"""The People and API keys pages' forms, and the invitation's: the shape of the input only
(the services check usernames and passwords, for every entry point)."""

from __future__ import annotations

from typing import Any

from django import forms

from tenants.models import Role

ROLE_CHOICES = Role.choices


class AddPersonForm(forms.Form):
    """Add someone by username; a new username creates the account (with a password to pass on)."""

    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=ROLE_CHOICES)
    email = forms.EmailField(required=False)
    password = forms.CharField(required=False, max_length=128, strip=False)


class InviteForm(forms.Form):
    """Invite a new person by email."""

    email = forms.EmailField(max_length=254)
    role = forms.ChoiceField(choices=ROLE_CHOICES)


class RoleForm(forms.Form):
    """A member's new role."""

    role = forms.ChoiceField(choices=ROLE_CHOICES)


class KeyForm(forms.Form):
    """A new key: its label and the member it acts as (by user id, checked against the tenant)."""

    name = forms.CharField(max_length=100, required=False)
    user = forms.IntegerField(min_value=1, max_value=2**63 - 1)


class AcceptInvitationForm(forms.Form):
    """The invited person's username and password, typed twice."""

    username = forms.CharField(max_length=150)
    password1 = forms.CharField(max_length=128, strip=False)
    password2 = forms.CharField(max_length=128, strip=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("password1") and data.get("password1") != data.get("password2"):
            self.add_error("password2", "The two passwords differ.")
        return data
