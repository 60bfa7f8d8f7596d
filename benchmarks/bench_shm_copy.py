"""How fast an OpenCL device copies to and from an MPI-3 shared-memory window (the intra-host all-reduce of
kernels/opencl/collective.py copies each bucket into one and the ranks' slots back), against pinned memory
(CL_MEM_ALLOC_HOST_PTR, mapped: the MPI_Allreduce path's buffers) and against the window registered with the driver
(a cl.Buffer with CL_MEM_USE_HOST_PTR over the window's memory, copied buffer to buffer).

    python benchmarks/bench_shm_copy.py --device 0 --sizes 512KB 2MB

Per size and kind, medians of --repeat copies each way: the copy's time (the host waits for it) and how long the
host spent in the enqueue of a non-blocking copy, on an idle queue and behind a device copy of --busy-mb MB (a driver
that stages pageable memory returns only once the queue reached the copy).
One process, a window of MPI_COMM_SELF. Not a test: the numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def _bytes(text: str) -> int:
    units = {"KB": 1 << 10, "MB": 1 << 20}
    return int(float(text[:-2]) * units[text[-2:].upper()]) if text[-2:].upper() in units else int(text)


def _median(cl, queue, dst, src, repeat: int, busy=None) -> tuple[float, float]:
    """(ms of a copy of `src` into `dst` waited for, ms the host spent enqueuing it), medians; `busy()` queues work
    before each copy (the host's enqueue then shows whether the driver waits for the queue to reach the copy)."""
    total, enqueue = [], []
    for _ in range(repeat):
        if busy is not None:
            busy()
        t0 = time.perf_counter()
        event = cl.enqueue_copy(queue, dst, src) if isinstance(dst, cl.Buffer) and isinstance(src, cl.Buffer) else \
            cl.enqueue_copy(queue, dst, src, is_blocking=False)
        t1 = time.perf_counter()
        event.wait()
        total.append(time.perf_counter() - t0)
        enqueue.append(t1 - t0)
    return 1e3 * float(np.median(total)), 1e3 * float(np.median(enqueue))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="0", help="the OpenCL device's index (as in opencl:K)")
    p.add_argument("--sizes", nargs="+", default=["512KB", "2MB"])
    p.add_argument("--repeat", type=int, default=50)
    p.add_argument("--busy-mb", type=int, default=512, help="MB of a device copy queued before each copy of the "
                   "'behind' rows")
    args = p.parse_args()
    from mpi4py import MPI

    from tfplus.runtime.opencl.discovery import cl, select
    cldev = select(args.device)
    ctx = cl.Context([cldev])
    queue = cl.CommandQueue(ctx)
    print(f"device {cldev.name.strip()}", flush=True)
    big = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 2 * args.busy_mb << 20)

    def busy():  # a device-to-device copy the queue runs before the copy timed
        cl.enqueue_copy(queue, big, big, byte_count=args.busy_mb << 20, dst_offset=args.busy_mb << 20)
    for size in map(_bytes, args.sizes):
        device = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, size)
        pinned_buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR, size)
        pinned, _ = cl.enqueue_map_buffer(queue, pinned_buf, cl.map_flags.READ | cl.map_flags.WRITE, 0, (size,),
                                          np.uint8, is_blocking=True)
        win = MPI.Win.Allocate_shared(size, 1, comm=MPI.COMM_SELF)
        window = np.ndarray((size,), np.uint8, buffer=win.Shared_query(0)[0])
        window[:] = 1
        kinds = {"pinned": pinned, "window": window}
        for name, host in kinds.items():
            out, back = _median(cl, queue, host, device, args.repeat), _median(cl, queue, device, host, args.repeat)
            print(f"{size >> 10:6d} KB {name:18s} device->host {out[0]:.3f} ms ({size / out[0] / 1e6:.1f} GB/s, "
                  f"enqueue {out[1]:.3f}), host->device {back[0]:.3f} ms ({size / back[0] / 1e6:.1f} GB/s, "
                  f"enqueue {back[1]:.3f})", flush=True)
            out, back = (_median(cl, queue, host, device, args.repeat, busy),
                         _median(cl, queue, device, host, args.repeat, busy))
            print(f"{size >> 10:6d} KB {name:18s} behind a {args.busy_mb} MB device copy: the host's enqueue of "
                  f"device->host {out[1]:.3f} ms, host->device {back[1]:.3f} ms (of {out[0]:.3f} / {back[0]:.3f})",
                  flush=True)
        registered = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR, hostbuf=window)
        out, back = _median(cl, queue, registered, device, args.repeat), _median(cl, queue, device, registered,
                                                                                  args.repeat)
        print(f"{size >> 10:6d} KB {'window USE_HOST_PTR':18s} device->buffer {out[0]:.3f} ms "
              f"({size / out[0] / 1e6:.1f} GB/s), buffer->device {back[0]:.3f} ms ({size / back[0] / 1e6:.1f} GB/s) "
              "(a copy into the window's own memory only where the driver uses it in place)", flush=True)
        win.Free()


if __name__ == "__main__":
    main()
