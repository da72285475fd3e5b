"""What every app of the site shares, below all of them: it imports no app.

- :mod:`sitekit.errors`: the site's errors, one tree beside the engine's, each with its
  stable code and HTTP status.
- :mod:`sitekit.db`: query helpers for the hot paths.
- :mod:`sitekit.postgresql`: Django's PostgreSQL backend, its pool lending connections
  without a round trip (``KEELGATE_DB_POOL``).
- :mod:`sitekit.api`: the REST API's shared shapes: error bodies, response tables,
  input patterns.
- :mod:`sitekit.paging`: lists that filter and page, declared once (the filters a list
  accepts, its keyset order, its cursors); :mod:`sitekit.keyset_sql` reads a page by hand
  for the hottest list.
- :mod:`sitekit.pages`: what every console page does: login required, CSP and
  no-store headers, domain errors as 404 / 403.
"""
