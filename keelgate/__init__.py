"""Keelgate: a durable agent loop whose WRITEs run exactly once, and never unapproved.

Start with :mod:`keelgate.loop` (the loop and its stores) and :mod:`keelgate.gateway`
(tools, grants and approvals). The engine imports no web framework.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
