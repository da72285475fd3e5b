"""Optional integrations, each behind an extra; the core imports none of them."""
