"""What paging a step's state to host memory over PCIe would cost on an OpenCL device: copies of the sizes a
MobileNet step under a budget would page (its optimizer slots, 13 MB at batch 128; a 4x4 / 16x16 / 32x32 layer's
rows, 4.2 / 16.8 / 33.5 MB), host to device and back, from pinned host memory (CL_MEM_ALLOC_HOST_PTR, mapped once,
as the runtime's feeds) and from pageable NumPy arrays; and whether a copy on a second queue overlaps a kernel on
the first (the time of both against each alone). Not a test.

    python benchmarks/bench_paging.py --device opencl:0
    python benchmarks/bench_paging.py --sizes 13,33.5 --reps 20
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

_SPIN = """__kernel void spin(__global float *x, int n) {
    int i = get_global_id(0); float v = x[i];
    for (int j = 0; j < n; ++j) v = v * 0.999f + 0.001f;
    x[i] = v; }"""


def _median_ms(fn, reps: int) -> float:
    fn()  # first use: the driver maps and pins lazily
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="opencl")
    ap.add_argument("--sizes", default="4.2,13,16.8,33.5", help="MB, comma-separated")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--spin", type=int, default=60000, help="the overlap kernel's loop count per element")
    args = ap.parse_args()

    import pyopencl as cl

    from tfplus.runtime import get_runtime
    rt = get_runtime(args.device)
    ctx, queue = rt.dev.ctx, rt.queue
    side = cl.CommandQueue(ctx)  # copies beside the kernels' queue
    mf = cl.mem_flags
    print(f"device: {rt.dev.device.name.strip()}")
    for mb in (float(x) for x in args.sizes.split(",")):
        n = int(mb * 1e6)
        dev = cl.Buffer(ctx, mf.READ_WRITE, n)
        pinned_buf = cl.Buffer(ctx, mf.READ_WRITE | mf.ALLOC_HOST_PTR, n)
        pinned, _ = cl.enqueue_map_buffer(queue, pinned_buf, cl.map_flags.READ | cl.map_flags.WRITE, 0, (n,),
                                          np.uint8, is_blocking=True)
        pageable = np.ones(n, np.uint8)
        row = [f"{mb:5.1f} MB:"]
        for name, host in (("pinned", pinned), ("pageable", pageable)):
            up = _median_ms(lambda d=dev, h=host: cl.enqueue_copy(queue, d, h, is_blocking=True), args.reps)
            down = _median_ms(lambda d=dev, h=host: cl.enqueue_copy(queue, h, d, is_blocking=True), args.reps)
            row.append(f"{name} up {up:6.3f} ms ({mb / up:5.1f} GB/s), down {down:6.3f} ms ({mb / down:5.1f} GB/s)")
        print("  ".join(row), flush=True)
    # Overlap: a kernel of about a copy's time on the kernels' queue, a pinned copy down on the other.
    n = int(33.5e6)
    dev = cl.Buffer(ctx, mf.READ_WRITE, n)
    pinned_buf = cl.Buffer(ctx, mf.READ_WRITE | mf.ALLOC_HOST_PTR, n)
    pinned, _ = cl.enqueue_map_buffer(queue, pinned_buf, cl.map_flags.READ | cl.map_flags.WRITE, 0, (n,), np.uint8,
                                      is_blocking=True)
    work = cl.Buffer(ctx, mf.READ_WRITE, 4 << 20)
    spin = cl.Program(ctx, _SPIN).build().spin

    def kernel():
        spin(queue, (1 << 20,), None, work, np.int32(args.spin))

    def copy():
        cl.enqueue_copy(side, pinned, dev, is_blocking=False)

    def both():
        kernel()
        copy()
        queue.finish()
        side.finish()
    k_ms = _median_ms(lambda: (kernel(), queue.finish()), args.reps)
    c_ms = _median_ms(lambda: (copy(), side.finish()), args.reps)
    b_ms = _median_ms(both, args.reps)
    print(f"overlap: kernel {k_ms:.3f} ms, 33.5 MB copy down {c_ms:.3f} ms, both queued at once {b_ms:.3f} ms "
          f"(hidden: {max(0.0, k_ms + c_ms - b_ms):.3f} ms of the shorter's {min(k_ms, c_ms):.3f})")


if __name__ == "__main__":
    main()
