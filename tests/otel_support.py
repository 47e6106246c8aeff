"""Span and log capture for the telemetry tests.

OpenTelemetry allows one global tracer provider per process, so the SDK
provider with an in-memory exporter is installed once and shared; each test
clears it. Logs are captured by a handler attached directly to the loggers that
matter, because the CLI tests set ``propagate = False`` on ``groundkit`` and a
root-only capture would then see nothing and pass vacuously.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

_EXPORTER: InMemorySpanExporter | None = None

# Loggers whose records are checked: ours, and the MCP SDK's and the HTTP
# server's, which log tool failures and requests on our behalf.
CAPTURED_LOGGERS = ("", "groundkit", "mcp", "uvicorn", "httpx")


def span_exporter() -> InMemorySpanExporter:
    """The process-wide in-memory exporter, installed on first use."""
    global _EXPORTER
    if _EXPORTER is None:
        exporter = InMemorySpanExporter()
        current = trace.get_tracer_provider()
        if isinstance(current, TracerProvider):
            current.add_span_processor(SimpleSpanProcessor(exporter))
        else:
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            trace.set_tracer_provider(provider)
        _EXPORTER = exporter
    return _EXPORTER


class _ListHandler(logging.Handler):
    def __init__(self, records: list[logging.LogRecord]) -> None:
        super().__init__(level=logging.DEBUG)
        self._records = records

    def emit(self, record: logging.LogRecord) -> None:
        self._records.append(record)


@dataclass
class Captured:
    """What was exported and logged while the capture was open."""

    exporter: InMemorySpanExporter
    records: list[logging.LogRecord] = field(default_factory=list)

    @property
    def spans(self) -> tuple[ReadableSpan, ...]:
        return self.exporter.get_finished_spans()

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans if s.name == name]

    def leaks(self, secret: str) -> list[str]:
        """Every span (as its full JSON) and INFO-or-above record that contains ``secret``."""
        found = [s.to_json() for s in self.spans if secret in s.to_json()]
        for record in self.records:
            if record.levelno < logging.INFO:
                continue
            text = record.getMessage()
            if record.exc_info:
                text += logging.Formatter().formatException(record.exc_info)
            if secret in text:
                found.append(f"log {record.name} {record.levelname}: {text}")
        return found


@contextmanager
def capture() -> Iterator[Captured]:
    """Collect spans and log records (every level) until the block ends."""
    exporter = span_exporter()
    exporter.clear()
    captured = Captured(exporter)
    handler = _ListHandler(captured.records)
    saved: list[tuple[logging.Logger, int]] = []
    for name in CAPTURED_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.level))
        logger.setLevel(logging.DEBUG)
        logger.addHandler(handler)
    try:
        yield captured
    finally:
        for logger, level in saved:
            logger.removeHandler(handler)
            logger.setLevel(level)
