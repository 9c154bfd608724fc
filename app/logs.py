"""One log format for the app and uvicorn: plain lines or JSON objects, at the level from settings.

uvicorn runs with `log_config=None` (app/cli.py), so its loggers ("uvicorn.error",
"uvicorn.access") have no handlers of their own and their records reach the root handler here.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, RFC 3339), level, logger, message, exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure(json_lines: bool, level: str) -> None:
    """Installs the one root handler (stderr) and the level; quiets per-request client lines."""
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"MODELDEPLOYMENT_LOG_LEVEL: unknown level {level!r} (DEBUG, INFO, WARNING, ERROR)")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
    # One line per API request or per hook call is noise above DEBUG; failures surface in our logs.
    quiet = logging.WARNING if numeric > logging.DEBUG else numeric
    for name in ("httpx2", "httpx", "uvicorn.access"):
        logging.getLogger(name).setLevel(quiet)
