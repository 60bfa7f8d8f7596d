"""MPI collectives on the opencl device: MPI reads and writes host memory (NCCL cannot take OpenCL buffers).

MpiAllreduce copies the packed buffer out, reduces it by the cpu kernel and copies it back, all blocking.
MpiAllreduceStart enqueues a non-blocking copy of each of its bucket's gradients, straight from the gradient's own
buffer into its part of the bucket's pinned host memory (runtime.pinned_array), and hands that buffer to the
communication thread (kernels/numpy/collective.py), which waits for the copies, then sums it over the ranks while the
queue goes on with the rest of the backward pass; MpiAllreduceWait copies each part of the sum back into its output.
No bucket is packed or unpacked on the device (ConcatV2 and SplitV were 30 copy kernels of a Mentee step).

With TFPLUS_ALLREDUCE_RUNAHEAD=1, MpiAllreduceWait runs ahead: it enqueues the copy back of the sum behind an OpenCL
user event that the communication thread completes once MPI returns, and returns at once, so the host queues the
updates, leaves session.run and queues the next step while the device and MPI work (in one process the host runs ahead
of the device the same way). Bounded to one step: a bucket's start waits until the step before last's copy back of
that bucket is done (the host waits for the thread, with the reducer's timeout, then for the device).
Blocking calls of the runtime (reads, finish) first wait for every released copy (OpenCLRuntime.settle), with the
same timeout.
The default on a GPU (see runahead): stop 48's two-rank figures, where running ahead did not pay, were two jobs of
one rank on one GPU (stop 50); on two H200s it pays once the communication thread flushes the queue after it opens a
gate (mpi1): 0.87-0.91x one GPU against 0.76-0.77x waiting. On a CPU device the host waits for each sum, then
queues its copies back.
Both put their host work on the tape (runtime.tape_host), so a planned step keeps replaying its launches.

NOTE: pyopencl's event of a copy from or to a host array (a NannyEvent) waits for the copy when it is dropped,
holding Python's lock. Dropped while its copy waits for a user event, it deadlocks: the communication thread needs
that lock to complete the event (PoCL and NVIDIA's driver alike: the hang of stop 42, once blamed on PoCL's enqueue).
So the copies' events are kept until they are done: the copies out's by their job, the copies back's, run ahead,
with their user event (OpenCLRuntime.gated), waiting, until the bucket's next wait.
"""
from __future__ import annotations

import atexit
import collections
import functools
import os
import sys

import numpy as np

from tfplus.kernels.numpy.collective import parts, reducer
from tfplus.kernels.opencl._common import run_on_host
from tfplus.registry import find_kernel, register_kernel
from tfplus.runtime.opencl.discovery import cl


@register_kernel("MpiAllreduce", "opencl", ("float32", "float64"))
def _mpi_allreduce(ctx, ins, outs, attrs):
    run_on_host(ctx, find_kernel("MpiAllreduce", "cpu", attrs["T"]), ins, outs, attrs, upload=True)


def runahead(rt) -> bool:
    """Whether MpiAllreduceWait queues the copies back behind a user event and returns (TFPLUS_ALLREDUCE_RUNAHEAD=1)
    or waits for each sum first (0). Unset: on a GPU, where two H200 ranks of Mentee ran 0.87-0.91x one GPU running
    ahead against 0.76-0.77x waiting (BENCHMARKS.md, mpib); not on a CPU device (PoCL), whose host and device share
    the cores, so that the host's running ahead only takes the device's time."""
    value = os.environ.get("TFPLUS_ALLREDUCE_RUNAHEAD", "").strip()
    if not value:
        return "GPU" in str(rt.info.get("type", ""))
    if value not in ("0", "1"):
        raise ValueError(f"TFPLUS_ALLREDUCE_RUNAHEAD={value!r}: give 1 (the host runs ahead of the sums) or 0 (it "
                         "waits for each), or leave it unset (1 on a GPU, 0 on a CPU device)")
    return value == "1"


_gates: dict = {}  # bucket key -> the user event its step's copy back waits for (made by the start, used by the wait)
# TFPLUS_ALLREDUCE_TRACE=device: (bucket key, "out" or "back", the copy's event), in order; reported at exit
_copies: list | None = [] if os.environ.get("TFPLUS_ALLREDUCE_TRACE") == "device" else None


def _timeline() -> None:
    """Where a step's time goes on the device (TFPLUS_ALLREDUCE_TRACE=device, a profiled queue), medians over the
    steps after the first two, us: each bucket's copy out, its copy out's end to its copy back's start (the device
    waits for the sum there unless it has other work queued), the copy back; the device's step (first copy out to
    first copy out), and the last copy back's end to the next step's first copy out (the updates, the next forward
    pass and the gradients up to the first bucket, and any time the device waits for the host's launches).
    NOTE: the profiled queue slows NVIDIA's steps (two H200 ranks: 8.4 ms a step with it, 3.2-3.9 ms without):
    read its times as proportions, and time the steps without it."""
    steps: list[dict] = []
    first = _copies[0][0] if _copies else None
    for key, kind, ev in _copies:
        if kind == "out" and key == first:
            steps.append({})
        if ev.command_execution_status == cl.command_execution_status.COMPLETE:  # else its step is left out
            steps[-1][key, kind] = (ev.profile.start * 1e-3, ev.profile.end * 1e-3)
    steps = [s for s in steps[2:] if len(s) == len(steps[-1])]
    if len(steps) < 3:
        return
    keys = sorted({k for k, _ in steps[0]})

    def med(k, a: str, i: int, b: str, j: int) -> float:  # from bucket k's copy a's time i to copy b's time j
        return float(np.median([s[k, b][j] - s[k, a][i] for s in steps]))
    parts = [f"bucket {k}: copy out {med(k, 'out', 0, 'out', 1):.0f}, -> copy back {med(k, 'out', 1, 'back', 0):.0f}"
             f", copy back {med(k, 'back', 0, 'back', 1):.0f}" for k in keys]
    last = max(keys, key=lambda k: steps[0][k, "out"][0])
    between = np.median([b[first, "out"][0] - a[last, "back"][1] for a, b in zip(steps, steps[1:])])
    period = np.median([b[first, "out"][0] - a[first, "out"][0] for a, b in zip(steps, steps[1:])])
    sys.stderr.write(f"tfplus all-reduce device timeline, rank {reducer.rank}, {len(steps)} steps, median us: "
                     f"{'; '.join(parts)}; last copy back's end -> next step's first copy out {between:.0f}; "
                     f"step {period:.0f}\n")


if _copies is not None:
    atexit.register(_timeline)


def _released(gate, queue):
    def release(ok: bool) -> None:  # on the communication thread, after the sum (a negative status: it failed)
        gate.set_status(cl.command_execution_status.COMPLETE if ok else -1)
        # NOTE: the commands queued behind the gate may reach the device only at the queue's next flush, and the
        # host flushed its last before the gate opened: on NVIDIA's driver the run-ahead device waited as if so
        # (stops 48, 50). A flush here hands them over now.
        queue.flush()
    return release


def _where(d) -> str:
    """A device's name and, on NVIDIA's driver, its PCI bus: two ranks on one GPU show in the trace."""
    try:
        bus = f", PCI bus {d.pci_bus_id_nv}"
    except (AttributeError, cl.Error):  # not NVIDIA's driver
        bus = ""
    return f"{d.platform.name.strip()} / {d.name.strip()}{bus}"


@register_kernel("MpiAllreduceStart", "opencl", ("float32", "float64"))
def _mpi_allreduce_start(ctx, ins, outs, attrs):
    rt, key, scale = ctx.runtime, attrs["key"], attrs["scale"]
    if reducer.trace is not None and not reducer.device:
        reducer.device = _where(rt.dev.device)
    where = parts([a.shape for a in ins])
    host = rt.pinned_array(("allreduce", key), (where[-1].stop,), ins[0].dtype)
    if any(a.host is not None for a in ins):  # values the host holds (computed there): nothing to copy out
        rt.tape_refuse(f"MpiAllreduceStart '{ctx.node_name}' reduces a value computed on the host")
        for a, at in zip(ins, where):
            host[at] = rt.copy_out(a).ravel()
        reducer.start(key, host, scale=scale)
        return
    # Each gradient straight from its own buffer into its part of the bucket's pinned host memory: a DMA each, no
    # packed copy on the device first.
    sources = [(rt.buffer(a), a.block.off, host[at]) for a, at in zip(ins, where) if at.stop > at.start]
    queue, ahead = rt.queue, runahead(rt) and host.nbytes > 0
    held = rt.gated.setdefault(key, collections.deque())

    def start():
        if len(held) > 1:  # one step ahead at most: the step before last's copy back of this bucket is done
            reducer.mark(f"bucket {key} waits for the step before last")
            finish, events = held[0]
            finish()  # NOTE: before the pop: an event dropped while its user event is unset would deadlock
            if events:
                events[-1].wait()  # on the device alone now (its user event is complete); in order: the others too
            held.popleft()
            reducer.mark(f"bucket {key} step before last done")
        copied = [cl.enqueue_copy(queue, part, buf, src_offset=off, is_blocking=False) for buf, off, part in sources]
        if _copies is not None and copied:
            _copies.append((key, "out", copied[-1]))
        rt.d2h_bytes += host.nbytes
        gate = _gates[key] = cl.UserEvent(rt.dev.ctx) if ahead else None

        def ready(events=copied) -> None:
            # NOTE: the job holds every copy's event until its sum is taken, all done by then: one dropped before
            # its copy is done waits for it, holding Python's lock (the host would wait for the backward pass)
            events[-1].wait()  # an in-order queue: the others are done before it
        reducer.start(key, host, ready if copied else None, _released(gate, queue) if ahead else None, scale)
    start()
    rt.tape_host(start, ("MpiAllreduceStart", key, *(id(b) for b, _, _ in sources), *(off for _, off, _ in sources)))


_backs: dict = {}  # bucket key -> its last copies' back events, waiting path (dropped by its next wait, done by then)


@register_kernel("MpiAllreduceWait", "opencl", ("float32", "float64"))
def _mpi_allreduce_wait(ctx, ins, outs, attrs):
    rt, key = ctx.runtime, attrs["key"]
    where = parts([o.shape for o in outs])
    targets = [(rt.buffer(o), o.block.off, at) for o, at in zip(outs, where) if at.stop > at.start]
    queue = rt.queue

    def copies(host, gate) -> list:  # the first behind `gate` (None: none); the queue is in order
        return [cl.enqueue_copy(queue, buf, host[at], dst_offset=off, is_blocking=False,
                                wait_for=[gate] if gate is not None and i == 0 else None)
                for i, (buf, off, at) in enumerate(targets)]

    # NOTE: non-blocking: `host` is written again only by the next step's copies out, queued after these.
    def wait():
        gate = _gates.pop(key, None)
        if gate is None:  # run-ahead off (or a host value): the sum first, then its copies back
            host = reducer.wait(key)
            events = _backs[key] = copies(host, None)  # NOTE: kept: dropped, each would wait for its copy
        else:
            job = reducer.take(key)
            host = job.host
            reducer.mark(f"bucket {key} waited")  # at once: the device waits for the sum instead
            events = copies(host, gate)
            rt.gated[key].append((functools.partial(reducer.finish, job), events))  # kept: see the module's NOTE
        if _copies is not None and events:
            _copies.append((key, "back", events[0]))
        rt.h2d_bytes += host.nbytes
        reducer.mark(f"bucket {key} copy back queued")
    wait()
    rt.tape_host(wait, ("MpiAllreduceWait", key, *(id(b) for b, _, _ in targets), *(off for _, off, _ in targets)))
