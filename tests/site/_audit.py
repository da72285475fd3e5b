"""The audit log's numbered events, as a test reads them after the product wrote some.

On PostgreSQL an event is inserted unnumbered with the change it records and numbered by
the sequencer or by the next reader of the log (``audit.wiring.integrate_pending``), so
a test that reads the table itself first does what every reader does.
"""

from __future__ import annotations

from django.db.models import QuerySet

from audit.models import AuditEvent
from audit.wiring import integrate_pending


def logged() -> QuerySet[AuditEvent]:
    """Every numbered event, once what is pending is numbered."""
    integrate_pending()
    return AuditEvent.objects.all()
