"""Spans of another process, for the tracing tests: a child process or a `heartq worker`
cannot share the test's in-memory exporter, so the modules they import export to a file
(`FILE_EXPORTER`, pasted into those modules' source) that the test reads (`read_spans`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FILE_EXPORTER = '''
import json as _json, os as _os
from opentelemetry.sdk.trace.export import SpanExporter as _SpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult as _SpanExportResult


class FileExporter(_SpanExporter):
    """Appends each span to `path`, one JSON object a line."""

    def __init__(self, path):
        self.path = path

    def export(self, spans):
        with open(self.path, "a") as f:
            for span in spans:
                f.write(_json.dumps({
                    "name": span.name,
                    "trace_id": span.context.trace_id,
                    "span_id": span.context.span_id,
                    "parent_id": span.parent.span_id if span.parent else None,
                    "pid": _os.getpid(),
                    "attributes": dict(span.attributes),
                }) + "\\n")
        return _SpanExportResult.SUCCESS
'''


def read_spans(path: Path) -> dict[str, list[dict[str, Any]]]:
    """The spans exported to `path`, by name, in the order they were exported."""
    found: dict[str, list[dict[str, Any]]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            span = json.loads(line)
            found.setdefault(span["name"], []).append(span)
    return found
