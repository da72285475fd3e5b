"""``python -m keelgate.audit.verify FILE [--vkey KEY] [--previous CHECKPOINT_FILE]``.

Checks an audit bundle offline (see :func:`keelgate.audit.verify_bundle`). Run it, never
import it: ``keelgate.audit.verify`` is the chain verifier, a function, and importing a
module of that name would put the module in its place. The command lives in
``keelgate.audit._cli``.
"""

from keelgate.audit._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
