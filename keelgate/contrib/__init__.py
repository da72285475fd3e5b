"""Optional integrations, each behind an extra; the core imports none of them."""

__all__: list[str] = []
