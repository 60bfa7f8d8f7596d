"""Tapes: the kernel launches and device copies of one run of a planned program, recorded as the launchers make
them and replayed without the launchers (OpenCLRuntime.tape_begin ... tape_play)."""
from __future__ import annotations

import os
import threading

import numpy as np

from tfplus.runtime.opencl.discovery import cl


def flush_every(host_work: bool = True) -> int:
    """Launches a replay enqueues between two flushes of the queue (TFPLUS_OPENCL_FLUSH; 0: none). By default 4 in
    a tape with host work (an all-reduce's copies), else 0.
    NOTE: OpenCL promises that enqueued commands reach the device only after a flush or a blocking call, and a
    replay makes neither: the H200 pair's trace (stop 43) fits a device that idled while the host queued a
    step's forward pass, until the communication thread's wait for the first all-reduce's copy out flushed it.
    A step with no host work keeps the host ahead of the device, and its flushes cost host time for nothing
    (H200, stop 43: Mentee 1.75-1.82 ms a step with or without them, MobileNet 5.94 ms without, 6.12 with)."""
    value = os.environ.get("TFPLUS_OPENCL_FLUSH", "4" if host_work else "0")
    if not value.strip().isdigit():
        raise ValueError(f"TFPLUS_OPENCL_FLUSH={value!r}: give how many launches a replay queues between two "
                         "flushes, a whole number (0: no flush)")
    return int(value)


class _Taping(threading.local):
    tape: Tape | None = None  # the tape this thread's launches are recorded on


taping = _Taping()


class Tape:
    """The kernel launches and device copies of one run of a compiled program (tfplus.engine.executor), recorded by
    the runtime as the launchers make them, to be replayed without the launchers: each launch gets a kernel
    object of its own whose arguments are set once, so a replay is one enqueue per launch (and a flush of the
    queue every few launches: flush_every).

    A replay is right only if the next run would launch the same kernels on the same memory with the same
    scalars. The executor replays a tape only after two runs recorded the same one, and only for a planned
    arena (fixed buffers); recording refuses what a replay could not repeat (`refuse`): host reads of values
    that can change from run to run, device reads, host values written into planned buffers. Host work that a
    kernel declares a fixed function of its buffers (`host`: an all-reduce's copies and hand-over) is called again
    by a replay, in its place among the launches; scalar arguments that a kernel declares new each run (`vary`: a
    random draw's run counter) are set anew just before their launch.
    The program's fed buffers may move between runs (each step's batch; micro-batches' rows): a launch
    argument inside a feed is recorded relative to it, and `play` points it at the feed's current place."""

    __slots__ = ("feeds", "fixed", "at", "items", "sig", "subs", "varies", "why", "launches")

    def __init__(self, feeds: list):
        self.feeds = feeds  # (buffer, offset, nbytes) of each feed while recording
        self.fixed: list = []  # where the buffers that must not move were (OpenCLRuntime.tape_begin)
        self.at = [(b, o) for b, o, _ in feeds]  # where the launches' feed arguments point now
        # ("k", Kernel, gsize, lsize, flat args), ("c", dst, dst_off, src, src_off, n) or ("h", host work)
        self.items: list = []
        self.sig: list = []  # what two recordings must agree on
        self.subs: list = []  # (item, argument position, feed, byte offset in the feed)
        self.varies: dict = {}  # launch item -> (position of its first varying argument, what gives them)
        self.why: str | None = None  # why it cannot be replayed
        self.launches = 0

    def refuse(self, why: str) -> None:
        if self.why is None:
            self.why = why

    def _where(self, item: int, pos: int, buf, off: int):
        """A buffer argument for the signature: (feed, offset in it), noted for `play`; else the buffer."""
        for i, (fb, fo, n) in enumerate(self.feeds):
            if buf is fb and fo <= off < fo + max(n, 1):
                self.subs.append((item, pos, i, off - fo))
                return ("feed", i, off - fo)
        return (id(buf), off)

    def launch(self, k, gsize, lsize, flat: list) -> None:
        item, sig = len(self.items), [k.name, gsize, lsize]
        pos = 0
        while pos < len(flat):
            a = flat[pos]
            if a is None or isinstance(a, cl.Buffer):  # a buffer and its byte offset: one entry
                sig.append(None if a is None else self._where(item, pos, a, flat[pos + 1]))
                pos += 2
                continue
            sig.append((a.dtype.str, a.tobytes()))
            pos += 1
        self.items.append(("k", k, gsize, lsize, list(flat)))
        self.sig.append(tuple(sig))
        self.launches += 1

    def copy(self, dst, dst_off: int, src, src_off: int, n: int) -> None:
        item = len(self.items)
        self.sig.append(("copy", self._where(item, 1, dst, dst_off), self._where(item, 3, src, src_off), n))
        self.items.append(["c", dst, dst_off, src, src_off, n])

    def vary(self, n: int, args, sig: tuple) -> None:
        """The last n arguments of the last launch, scalars, are `args()` in each replay (runtime.tape_vary)."""
        item = len(self.items) - 1
        flat = self.items[item][4] if item >= 0 and self.items[item][0] == "k" else []
        if len(flat) < n or not all(isinstance(a, np.generic) for a in flat[-n:]):
            raise ValueError(f"tape_vary: the last launch has no {n} trailing scalar arguments to vary")
        self.sig[-1] = (*self.sig[-1][:-n], ("vary", *sig))
        self.varies[item] = (len(flat) - n, args)

    def host(self, work, sig: tuple) -> None:
        """Host work a replay repeats here (runtime.tape_host): e.g. an all-reduce's copy out and hand-over."""
        self.sig.append(("host", *sig))
        self.items.append(("h", work))

    def same(self, other: Tape) -> bool:
        return self.sig == other.sig

    def compile(self, queue, every: int | None = None, polls: list = ()) -> None:
        """Turns the recorded items into enqueue calls: kernels get a clone each, arguments set once. A flush of
        the queue follows the first launch, every `every`-th (default flush_every(...)), each host item (an
        all-reduce's copies) and the last item, so that the device starts on a step's launches while the host
        queues the rest. In a tape with host work, each flush then calls `polls` (a list, read at each call: the
        all-reduce's jobs the main thread moves on, kernels/numpy/collective.Reducer.poll; with TFPLUS_OPENCL_FLUSH=0
        they move only when the host waits)."""
        host_work = any(it[0] == "h" for it in self.items)
        every = flush_every(host_work) if every is None else every
        flush = queue.flush
        if host_work and every:
            def flush() -> None:
                queue.flush()
                for poll in polls:
                    poll()
        calls, at, launched = [], [], 0  # at: each item's place among the calls
        for item, it in enumerate(self.items):
            if it[0] == "h":
                at.append(len(calls))
                calls.append((it[1], []))
            elif it[0] == "k":
                _, k, gsize, lsize, flat = it
                kc = k.k.clone()
                for pos, a in enumerate(flat):
                    if type(a) is int:
                        a = np.uint64(a)  # a buffer's byte offset (common.cl: GLOBAL)
                    kc.set_arg(pos, a)
                if item in self.varies:
                    calls.append((_set_args, [kc, *self.varies[item]]))
                at.append(len(calls))
                calls.append((cl._cl.enqueue_nd_range_kernel, [queue, kc, gsize, lsize]))
            else:
                at.append(len(calls))
                _, dst, dst_off, src, src_off, n = it
                calls.append((cl._cl._enqueue_copy_buffer, [queue, src, dst, n, src_off, dst_off]))
            launched += it[0] != "h"
            if every and (it[0] == "h" or launched == 1 or launched % every == 0):  # launched moved, or host work
                calls.append((flush, []))
        if every and calls and calls[-1][0] is not flush:
            calls.append((flush, []))
        self.items = calls
        self.subs = [(at[item], pos, i, rel) for item, pos, i, rel in self.subs]
        self.varies = {}

    def play(self, feeds: list) -> None:
        """Enqueues the recorded launches, with the feeds' arguments pointed at `feeds` (buffer, offset)."""
        if feeds != self.at:
            for item, pos, i, rel in self.subs:
                buf, off = feeds[i]
                fn, args = self.items[item]
                if fn is cl._cl._enqueue_copy_buffer:  # pos 1: dst, 3: src, as recorded
                    args[2 if pos == 1 else 1], args[5 if pos == 1 else 4] = buf, off + rel
                else:
                    args[1].set_arg(pos, buf)
                    args[1].set_arg(pos + 1, np.uint64(off + rel))
            self.at = list(feeds)
        for fn, args in self.items:
            fn(*args)


def _set_args(kc, pos: int, args) -> None:
    """Sets a replayed launch's varying arguments (Tape.vary) to `args()`, from position `pos` on."""
    for a in args():
        kc.set_arg(pos, a)
        pos += 1
