"""Device runtimes. Each is one file behind one small interface (see cpu.py's CPURuntime)."""
from __future__ import annotations

from tfplus.units import size_class  # noqa: F401  runtime.opencl sizes its pool so (home: tfplus.units)

DEVICE_FORMS = "cpu, opencl, opencl:N (`tfplus devices` lists them) or opencl:NAME (part of a device's name)"


def parse_device(device: str) -> tuple[str, str | None]:
    """('cpu', None) or ('opencl', selector or None): the one reader of device strings, for the runtimes, the
    planner and every CLI flag. The kind is case-insensitive; 'cpu:0' is the cpu; an opencl selector is an index
    or text in a device's name. Raises ValueError naming the string and the forms accepted.

        >>> parse_device("opencl:1"), parse_device("CPU")
        (('opencl', '1'), ('cpu', None))
    """
    if not isinstance(device, str):
        raise TypeError(f"device must be a string such as 'cpu' or 'opencl:0', got {device!r}")
    kind, colon, selector = device.strip().partition(":")
    kind, selector = kind.lower(), selector.strip()
    if kind == "cpu":
        if colon and selector != "0":
            raise ValueError(f"device {device!r}: there is one cpu device, 'cpu'")
        return "cpu", None
    if kind == "opencl":
        if colon and not selector:
            raise ValueError(f"device {device!r}: give an index or a name after 'opencl:', or plain 'opencl'")
        return "opencl", selector or None
    raise ValueError(f"unknown device {device!r}; use {DEVICE_FORMS}")


def get_runtime(device: str):
    """'cpu' -> the NumPy runtime; 'opencl', 'opencl:N' or 'opencl:<name>' -> an OpenCL device."""
    kind, selector = parse_device(device or "cpu")
    if kind == "cpu":
        from tfplus.runtime.cpu import CPURuntime
        return CPURuntime()
    from tfplus.runtime.opencl import OpenCLRuntime
    return OpenCLRuntime(selector)


# Recordings a kind of run gets before it runs without a tape for good.
TAPE_TRIES = 4


class Taped:
    """The recorded launches of one kind of run (a planned program's signature, Program._taped; a micro-batched
    step, planner.execute.Bound): the replayable tape, the last recording, and why there is none."""

    __slots__ = ("tape", "fetched", "last", "misses", "why", "vars_at")

    def __init__(self):
        self.tape = self.last = self.why = None
        self.fetched = None  # what the recorded run returned (its caller's to keep)
        self.misses = 0  # recordings that could not be replayed
        self.vars_at = -1  # the executor's var_version when the variables were last where the tape has them

    def run(self, rt, feeds: list, fixed, version: int, record) -> bool:
        """Replays the tape with the run's fed buffers `feeds`, or runs `record()` while recording it: a tape
        is ready once two runs recorded the same launches. `fixed()`: the buffers that must stay where they
        were (the variables, whose places are checked only when `version`, the executor's var_version, moved
        since they last matched); `record()` returns (what the caller keeps in `fetched`, the buffers the run
        returns). False: neither (no tape to be had now; the caller runs without one)."""
        if self.why is not None and self.misses >= TAPE_TRIES or rt.tape_recording():
            return False  # under another recording, the launches must go on that tape
        if self.tape is not None:
            if rt.tape_play(self.tape, feeds, None if self.vars_at == version else fixed()):
                self.vars_at = version
                return True
            self.tape = None  # a variable was made anew: record again
        if not rt.tape_begin(feeds, fixed()):
            return False
        try:
            kept, returned = record()
        except BaseException:
            rt.tape_end([])
            raise
        tape = rt.tape_end(returned)
        if isinstance(tape, str):  # what it did cannot be replayed: it will not be next time either
            self.why, self.misses = tape, TAPE_TRIES
        elif self.last is not None and self.last.same(tape):
            rt.tape_ready(tape)
            self.tape, self.fetched, self.last, self.why, self.vars_at = tape, kept, None, None, version
        else:
            self.last, self.misses, self.why = tape, self.misses + 1, "two runs launched different kernels or arguments"
        return True
