"""Runtime errors with TensorFlow's names; each names the node and op type it came from."""
from __future__ import annotations


class OpError(Exception):
    """An error raised while running a graph; `.node_name` and `.op_type` say where."""

    def __init__(self, node_name: str | None, op_type: str | None, message: str):
        self.node_name, self.op_type, self.message = node_name, op_type, message
        where = f"{op_type} '{node_name}': " if node_name else ""
        super().__init__(where + message)


class InvalidArgumentError(OpError, ValueError):
    pass


class FailedPreconditionError(OpError):
    pass


class NotFoundError(OpError):
    pass


class ResourceExhaustedError(OpError, MemoryError):
    pass


class DataLossError(OpError):
    pass


class AlreadyExistsError(OpError, FileExistsError):
    pass
