"""The REST API (owned by the API: see keelgate_site/api.py once it exists)."""

urlpatterns: list = []
