"""The job's collectives on the opencl device: MPI and gloo read and write host memory (NCCL cannot take OpenCL
buffers), so the buckets go through the host (kernels/numpy/collective.py calls the backend).

MpiAllreduce copies the packed buffer out, reduces it by the cpu kernel and copies it back, all blocking.
MpiAllreduceStart packs its bucket's gradients into a device buffer (a workspace of the op; one launch per 8
gradients, kernels/opencl/array.gather), enqueues a non-blocking copy of it into pinned host memory
(runtime.pinned_array) and hands that buffer to the communication thread (kernels/numpy/collective.py), which waits
for the copy, then sums it over the ranks while the queue goes on with the rest of the backward pass;
MpiAllreduceWait copies the sum back into a workspace and unpacks it into its outputs (array.scatter), which the
update reads (a bucket of one gradient is copied straight from and into its own buffer). Two launches and two copies
a bucket: ConcatV2, SplitV and their reshapes took a copy kernel per gradient each way (30 of a Mentee step), and a
copy per gradient to or from host memory cost NVIDIA's driver more host time still (BENCHMARKS.md, mpib).

Where every rank runs on this host (shared_ranks; TFPLUS_ALLREDUCE_SHM), the devices sum instead of MPI_Allreduce,
whose sum on the host ran at 2.4 GB/s on an H200 host (BENCHMARKS.md, mpishm): the Start copies the packed bucket into
this rank's slot of the bucket's next turn of an MPI-3 shared-memory window (Reducer.shared_slots), the communication
thread waits for the copy and meets the other ranks at a barrier, and the Wait copies every rank's slot, in one piece,
into a workspace and sums them in rank order, times `scale`, into the packed buffer (one launch, sum_slots in
array.cl): every rank computes the same sums bit for bit, so the ranks' weights stay equal. On a GPU (or with
TFPLUS_ALLREDUCE_SHM=pinned) the device copies to and from pinned memory instead, and the host copies
this rank's row into the window before the barrier and the other rows out of it after: NVIDIA's driver makes the host
wait until the queue reaches a copy to or from pageable memory (the window), which held the host back (run ahead, two
H200 ranks of Mentee: 0.90x one GPU directly, 0.93-0.98x through pinned memory).

On that path the main thread moves each exchange on itself (Reducer.post and poll; TFPLUS_ALLREDUCE_POLL=0 gives them
to the communication thread): at each flush of the replayed step's queue it looks whether the oldest bucket's copy out
is done (an event's status, no wait), then copies this rank's row into the window and starts a non-blocking barrier,
and once that is complete copies the other rows out and opens the gate (running ahead). With the thread, each bucket
woke it after its copy's wait, its memcpys and its barrier, each time for Python's lock, which it gets from a main
thread queuing launches only after the switch interval, the device idle behind the gate meanwhile (BENCHMARKS.md,
mpihost).

With TFPLUS_ALLREDUCE_RUNAHEAD=1, MpiAllreduceWait runs ahead: it enqueues the copy back of the sum behind an OpenCL
user event that the host's poll (or the communication thread) completes after the exchange, and returns at once, so
the host queues the updates, leaves session.run and queues the next step while the device and MPI work (in one
process the host runs ahead of the device the same way). Bounded to one step: a bucket's start waits until the step
before last's copy back of that bucket is done (the host waits for the exchange, with the reducer's timeout, then for
the device).
Blocking calls of the runtime (reads, finish) first wait for every released copy (OpenCLRuntime.settle), with the
same timeout.
The default on a GPU (see runahead): stop 48's two-rank figures, where running ahead did not pay, were two jobs of
one rank on one GPU (stop 50); on two H200s it pays once the communication thread flushes the queue after it opens a
gate (mpi1): 0.87-0.91x one GPU against 0.76-0.77x waiting. On a CPU device the host waits for each sum, then
queues its copy back.
Both put their host work on the tape (runtime.tape_host), so a planned step keeps replaying its launches.

NOTE: pyopencl's event of a copy from or to a host array (a NannyEvent) waits for the copy when it is dropped,
holding Python's lock. Dropped while its copy waits for a user event, it deadlocks: the communication thread needs
that lock to complete the event (PoCL and NVIDIA's driver alike: the hang of stop 42, once blamed on PoCL's enqueue).
So the copies' events are kept until they are done: a copy out's by its job, a copy back's, run ahead, with its
user event (OpenCLRuntime.gated), waiting, until the bucket's next wait.
"""
from __future__ import annotations

import atexit
import collections
import functools
import math
import os
import sys

import numpy as np

from tfplus.kernels.numpy.collective import parts, polling, reducer, shared_ranks
from tfplus.kernels.opencl._common import kernel, run_on_host
from tfplus.kernels.opencl.array import SRC, gather, scatter
from tfplus.registry import find_kernel, register_kernel, register_workspace
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


# pyopencl's enqueue_copy without its dispatch on the arguments' types (a few us a call, twice a bucket a step)
_read, _write = cl._cl._enqueue_read_buffer, cl._cl._enqueue_write_buffer
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
    def release(ok: bool) -> None:  # after the exchange, by a poll or the thread (a negative status: it failed)
        gate.set_status(cl.command_execution_status.COMPLETE if ok else -1)
        # NOTE: the commands queued behind the gate may reach the device only at the queue's next flush, and the
        # host flushed its last before the gate opened: on NVIDIA's driver the run-ahead device waited as if so
        # (stops 48, 50). A flush here hands them over now.
        queue.flush()
    return release


def _done(event) -> bool:
    """Whether `event` ended (complete, or failed: its wait raises), asked without waiting."""
    return event.command_execution_status <= cl.command_execution_status.COMPLETE


def _where(d) -> str:
    """A device's name and, on NVIDIA's driver, its PCI address (bus:slot, as nvidia-smi's pci.bus_id prints them):
    two ranks on one GPU show in the trace. The bus alone is not enough: GPUs of one host often share bus 0."""
    try:
        bus = f", PCI {d.pci_bus_id_nv:02x}:{d.pci_slot_id_nv:02x}"
    except (AttributeError, cl.Error):  # not NVIDIA's driver
        bus = ""
    return f"{d.platform.name.strip()} / {d.name.strip()}{bus}"


def _bucket(ins, attrs, compute_units):
    """The device buffer a bucket is packed in for its copy out (Start) or its sum copied back to (Wait); none for a
    bucket of one gradient, copied straight from and into its own buffer."""
    shapes = attrs["shapes"] if "shapes" in attrs else [x.shape for x in ins]
    return [((sum(math.prod(s) for s in shapes),), ins[0].dtype)] if len(shapes) > 1 else []


register_workspace("MpiAllreduceStart", "opencl")(_bucket)


@register_workspace("MpiAllreduceWait", "opencl")
def _sums(ins, attrs, compute_units):
    """_bucket's, and where the ranks sum on their devices (shared_ranks) the buffer their slots are copied to."""
    ranks = shared_ranks()
    return _bucket(ins, attrs, compute_units) + [((ranks * sum(math.prod(s) for s in attrs["shapes"]),),
                                                  ins[0].dtype)] * (ranks > 0)


@register_kernel("MpiAllreduceStart", "opencl", ("float32", "float64"))
def _mpi_allreduce_start(ctx, ins, outs, attrs):
    rt, key, scale = ctx.runtime, attrs["key"], attrs["scale"]
    if reducer.trace is not None and not reducer.device:
        reducer.device = _where(rt.dev.device)
    ws = _bucket(ins, attrs, None)
    packed = ctx.workspace(*ws[0]) if ws else ins[0]
    shared = shared_ranks() > 0
    # Through pinned memory on a GPU (two H200 ranks of Mentee: 0.93-0.98x one GPU against 0.90x copying to and from
    # the window, pageable memory, whose copies NVIDIA's driver makes the host wait for; BENCHMARKS.md, mpishm).
    reducer.gpu = "GPU" in str(rt.info.get("type", ""))
    if reducer.staged is None:
        reducer.staged = reducer.gpu

    def slot():
        """(where this rank's copy goes, what the job reduces, its scale, its `shared`): this rank's row of the
        bucket's next turn in shared memory (or of pinned memory of its shape: reducer.staged) and the rows, where the
        devices sum (the scale too), else pinned memory for MPI_Allreduce."""
        if shared:
            turn, me = reducer.shared_slots(key, packed.size, packed.dtype), reducer.host().Get_rank()
            rows = rt.pinned_array(("allreduce", key), turn.shape, packed.dtype) if reducer.staged else turn
            return rows[me], rows, 1.0, (turn, me)
        host = rt.pinned_array(("allreduce", key), (packed.size,), packed.dtype)
        return host, host, scale, None
    if any(a.host is not None for a in ins):  # values the host holds (computed there): nothing to copy out
        rt.tape_refuse(f"MpiAllreduceStart '{ctx.node_name}' reduces a value computed on the host")
        host, reduced, times, where = slot()
        for a, at in zip(ins, parts([a.shape for a in ins])):
            host[at] = rt.copy_out(a).ravel()
        reducer.start(key, reduced, scale=times, shared=where)
        return
    # Packed on the device by one launch (per 8 gradients), copied out by one DMA: a DMA per gradient cost an H200
    # step's host ~25 us each (BENCHMARKS.md, mpib), a ConcatV2 a copy kernel each.
    if ws:
        gather(rt, packed, ins)
    buf, off, queue, ahead = rt.buffer(packed), packed.block.off, rt.queue, runahead(rt) and packed.size > 0
    held = rt.gated.setdefault(key, collections.deque())
    polled = shared and polling(reducer.gpu)
    if polled and reducer.poll not in rt.dev.polls:
        rt.dev.polls.append(reducer.poll)

    def start():
        if len(held) > 1:  # one step ahead at most: the step before last's copy back of this bucket is done
            reducer.mark(f"bucket {key} waits for the step before last")
            finish, event = held[0]
            finish()  # NOTE: before the pop: an event dropped while its user event is unset would deadlock
            event.wait()  # on the device alone now (its user event is complete)
            held.popleft()
            reducer.mark(f"bucket {key} step before last done")
        host, reduced, times, where = slot()
        copied = _read(queue, buf, host, src_offset=off, is_blocking=False) if host.nbytes else None
        if _copies is not None and copied is not None:
            _copies.append((key, "out", copied))
        rt.d2h_bytes += host.nbytes
        gate = _gates[key] = cl.UserEvent(rt.dev.ctx) if ahead else None
        if polled:
            reducer.post(key, reduced, copied and copied.wait, copied and functools.partial(_done, copied),
                         _released(gate, queue) if ahead else None, where)
        else:
            reducer.start(key, reduced, copied and copied.wait, _released(gate, queue) if ahead else None, times,
                          where)
    start()
    rt.tape_host(start, ("MpiAllreduceStart", key, id(buf), off))


_backs: dict = {}  # bucket key -> its last copy back's event, waiting path (dropped by its next wait, done by then)


@register_kernel("MpiAllreduceWait", "opencl", ("float32", "float64"))
def _mpi_allreduce_wait(ctx, ins, outs, attrs):
    rt, key, ranks = ctx.runtime, attrs["key"], shared_ranks()
    ws = _sums(ins, attrs, None)
    packed = ctx.workspace(*ws[0]) if len(outs) > 1 else outs[0]
    slots = ctx.workspace(*ws[-1]) if ranks else packed  # the ranks' slots, copied in one piece, else the sum
    buf, off, queue = rt.buffer(slots), slots.block.off, rt.queue

    # NOTE: non-blocking: `host` is written again only by the next step's copy out, queued after this one.
    def wait():
        gate = _gates.pop(key, None)
        if gate is None:  # run-ahead off (or a host value): the sum first, then its copy back
            host = reducer.wait(key)
            if host.nbytes:  # NOTE: kept: dropped, it would make the host wait for its copy
                event = _backs[key] = _write(queue, buf, host, dst_offset=off, is_blocking=False)
        else:
            job = reducer.take(key)
            host = job.host
            reducer.mark(f"bucket {key} waited")  # at once: the device waits for the sum instead
            event = _write(queue, buf, host, dst_offset=off, is_blocking=False, wait_for=[gate])
            rt.gated[key].append((functools.partial(reducer.finish, job), event))  # kept: see the module's NOTE
        if _copies is not None and host.nbytes:
            _copies.append((key, "back", event))
        rt.h2d_bytes += host.nbytes
        reducer.mark(f"bucket {key} copy back queued")
    wait()
    rt.tape_host(wait, ("MpiAllreduceWait", key, id(buf), off))
    if ranks and packed.size:  # queued after the copy back, on the tape too
        rt.run1d(kernel(rt, SRC, "sum_slots", packed.dtype), packed.size, packed, slots, np.int32(packed.size),
                 np.int32(ranks), packed.dtype.type(attrs["scale"]))
    if len(outs) > 1:
        scatter(rt, outs, packed)  # queued after the copy back, on the tape too
