"""A worker process that traces: the crash scenario with every ended span appended to a JSON-lines file.

Usage::

    python tests/integration/_traced_child.py DIR SPANS [--recover]

Armed like ``_crash_child.py`` (``KEELGATE_FAILPOINT``, ``KEELGATE_TEST_TOOL_CRASH``). A
simple (synchronous) span processor writes each span as it ends, so a process killed
mid-run leaves every span it finished, as an exporter that had sent them would.
``--recover`` drives the run to its goal the way a person would (``recover``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

_REPO = str(Path(__file__).resolve().parents[2])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)

from opentelemetry import trace  # noqa: E402  (needs the path above)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult  # noqa: E402

from tests.integration._scenario import TOOL_CRASH_ENV, make_world, open_loop, recover  # noqa: E402


class JsonLinesExporter(SpanExporter):
    """Appends one JSON object per ended span: name, ids, parent, attributes, process."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a") as out:
            for span in spans:
                context = span.get_span_context()
                assert context is not None
                out.write(
                    json.dumps(
                        {
                            "name": span.name,
                            "trace_id": f"{context.trace_id:032x}",
                            "span_id": f"{context.span_id:016x}",
                            "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
                            "attributes": dict(span.attributes or {}),
                            "pid": os.getpid(),
                        }
                    )
                    + "\n"
                )
        return SpanExportResult.SUCCESS


def main() -> int:
    root, spans = sys.argv[1], sys.argv[2]
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(spans)))
    trace.set_tracer_provider(provider)
    world = make_world(root)
    try:
        loop = open_loop(world, failpoints_from_env=True)
        crash = os.environ.get(TOOL_CRASH_ENV, "")
        if crash:
            side, _, nth = crash.partition(":")
            assert world.ledger is not None
            world.ledger.crash = (side, int(nth or 1), "exit")  # type: ignore[assignment]
        driven = recover(world) if "--recover" in sys.argv else world.start(loop)
        result = asyncio.run(driven)
        print(json.dumps({"stop_reason": result.stop_reason.value}), flush=True)
        return 0
    finally:
        world.close()


if __name__ == "__main__":
    sys.exit(main())
