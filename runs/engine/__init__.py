"""The engine adapter: Keelgate's engine on the Django database, in one place.

- :mod:`~runs.engine.fencing`: lease epochs that fence a superseded worker's writes.
- :mod:`~runs.engine.stores`: the checkpoint and idempotency stores on the ORM (the
  audit log is ``audit.store``); a save announces ``runs.signals.checkpoint_saved``.
- :mod:`~runs.engine.stores_postgresql`: the same stores by PostgreSQL's own statements,
  with the worker's fence checked by the server.
- :mod:`~runs.engine.loops`: the wiring (which commit group, which stores) and an agent's
  :class:`~keelgate.loop.Loop` over them.
- :mod:`~runs.engine.worker`: ``keelgate_worker``: claim a run under a lease, drive it.
- :mod:`~runs.engine.monitors`: READ-only monitors the worker ticks.
- :mod:`~runs.engine.temporal`: runs handed to Temporal instead of the worker.

It sits above ``runs.services`` (every status change goes through them) and below the
runs pages and API; the agents it runs are registered in ``runs.agents``.
"""
