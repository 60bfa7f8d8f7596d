"""A process that signals itself when it reaches a named moment of its life: the kill sweep's `--phases` put this
folder on PYTHONPATH, so that Python runs it at start (site's sitecustomize), and name the moment in
$TFPLUS_PHASE_SIGNAL as `WHERE SIGNAL [group] [HOLD]`:

    call:MODULE:NAME[#N]     before the Nth call (default the first) of MODULE's function or Class.method NAME
    return:MODULE:NAME[#N]   after the Nth call returned (a call that raised does not count)
    import:MODULE            before MODULE's code runs, when it is first imported
    exit:threads             while Python ends: before it joins the process's threads (threading._shutdown)
    exit:atexit              while Python ends: the first atexit function (registered when tfplus.cli.main returns)

    TFPLUS_PHASE_SIGNAL="return:tfplus.trainer:build_graph SIGTERM group" tfplus train --synthetic ...

`group` sends it to the process group (a terminal's Ctrl-C), else to the process; `rank0`: only rank 0 of an MPI
job acts (mpiexec gives every rank the variable); HOLD seconds (default 0) are then
slept where the moment is, keeping the process there (a checkpoint write held open, as by a slow disk). The signal
comes exactly at the moment, so a trial is deterministic where a delay is not. Only the process started with the
variable acts: it is taken out of the environment (children started later do not get it), and a forked child
(a step's worker process) never acts. $TFPLUS_PHASE_FIRED names a file made when the moment comes (a sweep's proof
that it did). Not imported by tfplus; a test and sweep tool.
"""
import atexit
import functools
import importlib.abc
import os
import signal
import sys
import threading
import time

_SPEC = os.environ.pop("TFPLUS_PHASE_SIGNAL", "")
_FIRED = os.environ.pop("TFPLUS_PHASE_FIRED", "")  # a file made when the moment comes (it may never)
_PID = os.getpid()


def _send(signame: str, group: bool, hold: float) -> None:
    if os.getpid() != _PID:
        return
    signum = getattr(signal, signame)
    if _FIRED:
        open(_FIRED, "w").close()
    if group:
        os.killpg(os.getpgid(0), signum)
    else:
        os.kill(_PID, signum)
    if hold:
        time.sleep(hold)


def _patch(module, name: str, when: str, nth: int, send) -> None:
    """Wraps attribute `name` (dotted: Class.method) of `module` so that `send` runs at its `nth` call or return."""
    owner, attr = module, name
    if "." in name:
        cls, attr = name.rsplit(".", 1)
        owner = functools.reduce(getattr, cls.split("."), module)
    inner = getattr(owner, attr)
    calls = [0]

    @functools.wraps(inner)
    def wrapper(*args, **kwargs):
        if when == "call":
            calls[0] += 1
            if calls[0] == nth:
                send()
        result = inner(*args, **kwargs)
        if when == "return":
            calls[0] += 1
            if calls[0] == nth:
                send()
        return result

    if isinstance(owner, type) and isinstance(owner.__dict__.get(attr), (staticmethod, classmethod)):
        wrapper = type(owner.__dict__[attr])(wrapper)
    setattr(owner, attr, wrapper)


class _OnImport(importlib.abc.MetaPathFinder):
    """Runs `then(module)` right after (or, `before`, right before) module `name`'s code runs at its first import."""

    def __init__(self, name: str, then, before: bool = False):
        self.name, self.then, self.before = name, then, before

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = next(s for f in sys.meta_path if (s := getattr(f, "find_spec", lambda *a: None)(fullname, path, target)))
        load, hook = spec.loader.exec_module, self

        def exec_module(module):
            if hook.before:
                hook.then(module)
            load(module)
            if not hook.before:
                hook.then(module)
        spec.loader.exec_module = exec_module
        return spec


def _when_imported(name: str, then, before: bool = False) -> None:
    if name in sys.modules and not before:
        then(sys.modules[name])
    else:
        sys.meta_path.insert(0, _OnImport(name, then, before))


def _install(spec: str) -> None:
    words = spec.split()
    where, signame = words[0], words[1]
    group = "group" in words[2:]
    hold = float(next((w for w in words[2:] if w not in ("group", "rank0")), 0))
    if "rank0" in words[2:] and os.environ.get("PMI_RANK", "0") != "0":  # (MPICH's)
        return
    send = functools.partial(_send, signame, group, hold)
    kind, _, rest = where.partition(":")
    if kind in ("call", "return"):
        module, _, name = rest.partition(":")
        name, _, nth = name.partition("#")
        _when_imported(module, lambda m: _patch(m, name, kind, int(nth or 1), send))
    elif kind == "import":
        _when_imported(rest, lambda m: send(), before=True)
    elif where == "exit:threads":
        shutdown = threading._shutdown

        def _shutdown():
            send()
            shutdown()
        threading._shutdown = _shutdown
    elif where == "exit:atexit":
        _when_imported("tfplus.cli", lambda m: _patch(m, "main", "return", 1, lambda: atexit.register(send)))
    else:
        raise SystemExit(f"TFPLUS_PHASE_SIGNAL: unknown moment {where!r} (call:, return:, import:, exit:threads, "
                         "exit:atexit)")


if _SPEC:
    _install(_SPEC)
