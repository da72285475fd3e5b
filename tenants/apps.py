from django.apps import AppConfig


class TenantsConfig(AppConfig):
    """Tenants and who may do what in them."""

    name = "tenants"
