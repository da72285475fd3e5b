"""What every app of the site shares, below all of them: it imports no app.

- :mod:`sitekit.errors`: the site's errors, one tree beside the engine's, each with its
  stable code and HTTP status.
- :mod:`sitekit.db`: query helpers for the hot paths.
- :mod:`sitekit.postgresql`: Django's PostgreSQL backend, its pool lending connections
  without a round trip (``KEELGATE_DB_POOL``).
- :mod:`sitekit.api`: the REST API's shared shapes: error bodies, response tables,
  keyset pagination, input patterns.
- :mod:`sitekit.pages`: what every console page does: login required, CSP and
  no-store headers, domain errors as 404 / 403.
"""
