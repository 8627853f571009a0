"""The reconciler's log lines: one JSON object per line (the default), or text for people.

Called by `kaiwu reconcile` (reconciler.cli.reconcile), which configures logging once from its
settings before anything else starts. Each record carries the fields its call passed as
`extra=` (cluster, kind, error, ...) as keys of its own.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and the call's extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    """For people: time level logger: message key=value ..."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        extra = " ".join(f"{key}={value}" for key, value in vars(record).items()
                         if key not in _STANDARD and not key.startswith("_"))
        if not extra:
            return text
        head, newline, rest = text.partition("\n")  # keep a traceback below the fields
        return f"{head} {extra}{newline}{rest}"


def configure_logging(log_format: str, log_level: str) -> None:
    """Every record to stderr, in `log_format` ("json" or "text"), from `log_level` up (the
    reconciler's settings of those names)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(log_level.upper())
    # The kubernetes client and urllib3 log every retry at warning; ours say it better.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
