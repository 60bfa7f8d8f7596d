"""A step is not cut in two by a signal: the Python handlers of the signals a user stops a program with run after it.

TF1 runs a step in C++, where Python's signal handlers wait for Session.run to return, so Ctrl-C (or a SIGTERM
handler that raises) never leaves some variables updated and others not. Here a step is Python, and a handler
runs between any two of its bytecodes: a KeyboardInterrupt between two updates left a model torn (half the step's
Assigns applied), which the next save wrote as a checkpoint. So while a step runs in the main thread (the one
where Python runs handlers), `deferred` takes the STOPS signals that have a Python handler, notes them, and calls
that handler after the step, as TF1 does. The same signal again before the step ends calls the handlers at once
(the first one's too): a user pressing Ctrl-C twice on a step that does not end gets the KeyboardInterrupt then.

    >>> with deferred():   # Ctrl-C here raises KeyboardInterrupt on leaving     # doctest: +SKIP
    ...     step()
"""
from __future__ import annotations

import _signal  # NOTE: signal.py's getsignal and signal convert handlers to and from enums: ~4 us a call, the C
import signal  # module's ~0.1 and ~1 us (a run calls five)
import threading

# The signals that stop a program (Ctrl-C, kill, a closed terminal); others keep their handlers.
STOPS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
_depth = {"main": 0}  # nested steps (a step's hook running another) defer once, in the outermost


class deferred:
    """Inside, in the main thread, STOPS signals with a Python handler are noted and handled on leaving (see the
    module doc); elsewhere (other threads, where no handler runs) nothing changes. (A class, not a generator: a
    run enters one, and a generator's context costs ~2 us more.)"""

    __slots__ = ("handlers", "caught")

    def __enter__(self) -> deferred:
        self.handlers = None
        if _depth["main"] or threading.current_thread() is not threading.main_thread():
            return self
        self.handlers, self.caught = {}, []
        for s in STOPS:
            h = _signal.getsignal(s)
            if callable(h):  # SIG_DFL and SIG_IGN act in the OS and never in the middle of Python code
                self.handlers[s] = h
                _signal.signal(s, self._note)
        _depth["main"] += 1
        return self

    def _note(self, signum, frame) -> None:
        caught = self.caught
        if any(s == signum for s, _ in caught):  # asked twice: now, the first one's handler first
            pending = caught[:] + [(signum, frame)]
            caught.clear()
            _handle(self.handlers, pending)
        else:
            caught.append((signum, frame))

    def __exit__(self, *exc) -> None:
        if self.handlers is None:
            return
        _depth["main"] -= 1
        for s, h in self.handlers.items():
            _signal.signal(s, h)
        _handle(self.handlers, self.caught)


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP as an interrupt (raise_stopped), as Python makes SIGINT a KeyboardInterrupt: what the
    command line's handler raises until a command installs a stop of its own (tfplus.cli)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def raise_stopped(signum, frame) -> None:
    raise Stopped(signum)


def _handle(handlers: dict, pending: list) -> None:
    for signum, frame in pending:
        handlers[signum](signum, frame)
