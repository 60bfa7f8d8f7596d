"""Runtime errors with TensorFlow's names; each names the node and op type it came from."""
from __future__ import annotations


class OpError(Exception):
    """An error raised while running a graph; `.node_name` and `.op_type` say where, `.error_code` is TF's code."""

    error_code = 2  # UNKNOWN

    def __init__(self, node_name: str | None, op_type: str | None, message: str):
        self.node_name, self.op_type, self.message = node_name, op_type, message
        where = f"{op_type} '{node_name}': " if node_name else ""
        super().__init__(where + message)


class InvalidArgumentError(OpError, ValueError):
    error_code = 3


class FailedPreconditionError(OpError):
    error_code = 9


class NotFoundError(OpError):
    error_code = 5


class OutOfRangeError(OpError):
    """An input is exhausted: an iterator's get_next() past the end of its dataset (the usual end of a loop)."""

    error_code = 11


class ResourceExhaustedError(OpError, MemoryError):
    error_code = 8


class DataLossError(OpError):
    error_code = 15


class AlreadyExistsError(OpError, FileExistsError):
    error_code = 6


class UnavailableError(OpError):
    """The runtime cannot serve the step now (a worker process died or stopped); the session can still be saved."""

    error_code = 14
