"""Django's PostgreSQL backend, whose pool lends a connection without a round trip.

``ENGINE = "sitekit.postgresql"`` when ``KEELGATE_DB_POOL`` is set (``keelgate_site/settings.py``);
everything but the pool's health check is Django's own backend (:mod:`sitekit.postgresql.base`).
"""
