from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    """The inbox: pending approvals and unknown outcomes, and the decisions on them."""

    name = "approvals"
