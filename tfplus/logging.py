"""tf.logging (TF1): levelled messages through Python's logging, on the logger named "tensorflow" so that
tools which configure TF's logger configure this one too.

    import tfplus as tf
    tf.logging.set_verbosity(tf.logging.INFO)
    tf.logging.info("step %d: loss %.3f", step, loss)
"""
from __future__ import annotations

import logging as _logging
import sys

DEBUG, INFO, WARN, ERROR, FATAL = _logging.DEBUG, _logging.INFO, _logging.WARN, _logging.ERROR, _logging.FATAL

_logger = _logging.getLogger("tensorflow")
if not _logger.handlers:
    _handler = _logging.StreamHandler(sys.stderr)
    _handler.setFormatter(_logging.Formatter("%(levelname)s:%(name)s:%(message)s"))
    _logger.addHandler(_handler)
    _logger.setLevel(WARN)  # TF1's default verbosity
    _logger.propagate = False


def get_logger() -> _logging.Logger:
    return _logger


def set_verbosity(v) -> None:
    _logger.setLevel(v)


def get_verbosity() -> int:
    return _logger.getEffectiveLevel()


def log(level, msg, *args, **kwargs) -> None:
    _logger.log(level, msg, *args, **kwargs)


def debug(msg, *args, **kwargs) -> None:
    _logger.debug(msg, *args, **kwargs)


def info(msg, *args, **kwargs) -> None:
    _logger.info(msg, *args, **kwargs)


def warning(msg, *args, **kwargs) -> None:
    _logger.warning(msg, *args, **kwargs)


warn = warning


def error(msg, *args, **kwargs) -> None:
    _logger.error(msg, *args, **kwargs)


def fatal(msg, *args, **kwargs) -> None:
    _logger.fatal(msg, *args, **kwargs)


def vlog(level, msg, *args, **kwargs) -> None:
    """TF1's verbose log: at the Python logging level `level`."""
    _logger.log(level, msg, *args, **kwargs)


def log_if(level, msg, condition, *args) -> None:
    if condition:
        log(level, msg, *args)


def flush() -> None:
    for handler in _logger.handlers:
        handler.flush()


def TaskLevelStatusMessage(msg) -> None:  # noqa: N802 (TF's name)
    error(msg)


_counts: dict = {}


def log_every_n(level, msg, n, *args) -> None:
    """Logs on the 1st, (n+1)th, ... call from the same place."""
    caller = sys._getframe(1)
    key = (caller.f_code.co_filename, caller.f_lineno)
    count = _counts.get(key, 0)
    _counts[key] = count + 1
    if count % n == 0:
        log(level, msg, *args)


def log_first_n(level, msg, n, *args) -> None:
    """Logs only the first n calls from the same place."""
    caller = sys._getframe(1)
    key = (caller.f_code.co_filename, caller.f_lineno)
    count = _counts.get(key, 0)
    _counts[key] = count + 1
    if count < n:
        log(level, msg, *args)
