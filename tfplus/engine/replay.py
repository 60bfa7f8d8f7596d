"""Record, then replay: the engine's one home of the rule that runs repeated work from a recording of it.

A planned program's signature (executor.Program._taped) and a micro-batched step (memory.Bound._microbatched)
run the same launches every time, so a runtime that records launches (OpenCL: runtime.tape_*) replays them
instead of paying the launchers' Python per run. One state machine, `Recording`, decides for both: record,
replay once AGREE consecutive recordings launched the same kernels with the same arguments, record again when
a variable was made anew, and give up after TRIES recordings that could not be replayed. A micro-batch merge
(`Merges`) replays the runtime's own record of it (runtime.accumulation) while it merges the same buffers.

(A program's fast loop is recorded too, from its first careful run of a signature: executor.Program._specialize.
It is exact by construction, so it is kept at once.)
"""
from __future__ import annotations

# Consecutive recordings that must agree before a tape replays: one more than the first, so that a run whose
# launches differ the next time (a first-run-only kernel, a value-dependent launch) is never replayed.
AGREE = 2

# Recordings a kind of run gets before it runs without a tape for good.
TRIES = 4


class Recording:
    """The recorded launches of one kind of run: the replayable tape, the last recording, and why there is none."""

    __slots__ = ("tape", "fetched", "last", "agreed", "misses", "why", "vars_at")

    def __init__(self):
        self.tape = self.last = self.why = None
        self.fetched = None  # what the recorded run returned (its caller's to keep)
        self.agreed = 0  # consecutive recordings the same as `last`, it included
        self.misses = 0  # recordings that could not be replayed
        self.vars_at = -1  # the executor's var_version when the variables were last where the tape has them

    @property
    def given_up(self) -> bool:
        """Whether this kind of run goes without a tape for good (`why` says why)."""
        return self.why is not None and self.misses >= TRIES

    def run(self, rt, feeds: list, fixed, version: int, record) -> bool:
        """Replays the tape with the run's fed buffers `feeds`, or runs `record()` while recording it. `fixed()`:
        the buffers that must stay where they were (the variables, whose places are checked only when `version`,
        the executor's var_version, moved since they last matched); `record()` returns (what the caller keeps in
        `fetched`, the buffers the run returns). False: neither (no tape to be had now; the caller runs without
        one)."""
        if self.given_up or rt.tape_recording():
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
            self.why, self.misses = tape, TRIES
            return True
        self.agreed = self.agreed + 1 if self.last is not None and self.last.same(tape) else 1
        self.last = tape
        if self.agreed >= AGREE:
            rt.tape_ready(tape)
            self.tape, self.fetched, self.last, self.agreed, self.why, self.vars_at = tape, kept, None, 0, None, version
        elif self.agreed == 1:  # a first recording, or one unlike the last
            self.misses += 1
            self.why = "two runs launched different kernels or arguments"
        return True


class Merges:
    """A plan's micro-batch merges (acc = x, acc += x, acc *= factor, over many buffers at once) by the runtime's
    `accumulation`, which returns a function repeating a merge's launches on the same buffers (None: nothing to
    save): the next merge of that kind calls it (~60 us of Python a merge less: host time that a micro-batched
    step spends between its runs)."""

    def __init__(self):
        self.last: dict = {}  # (how, factor) -> the runtime's repeat of its last merge, or None

    def run(self, rt, how: str, pairs: list, factor: float) -> None:
        if not pairs:
            return
        accs, xs = [a for a, _ in pairs], None if how == "scale" else [x for _, x in pairs]
        if rt.tape_recording():  # recording a step (Bound._microbatched): its launches go on that tape
            rt.accumulate(accs, xs, how, factor)
            return
        again = self.last.get((how, factor))
        if again is None or not again(accs, xs):
            self.last[(how, factor)] = rt.accumulation(accs, xs, how, factor)
