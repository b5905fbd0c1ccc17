"""Logging once: :func:`log_once`, the library's one record of messages already logged."""

from __future__ import annotations

import logging

_logged: set[tuple[str, str]] = set()


def log_once(log: logging.Logger, message: str, level: int = logging.INFO) -> None:
    """Logs ``message`` on ``log`` the first time this process sees it there."""
    key = (log.name, message)
    if key not in _logged:
        _logged.add(key)
        log.log(level, message)
