"""Tile sizes for the GEMM-based kernels (matmul.cl, conv.cl), chosen per device and problem by timing a few
candidates on the real buffers at first use; the choice is kept in the device's tuning file (see
tfplus.runtime.opencl.cache_dir()). CPU devices (PoCL) use one small fixed tile, so tests compile one variant.

Tuning is bounded, so that a fresh machine reaches its first step quickly: each candidate is a program to
compile, and a step has a dozen problems. A process tunes problems until it has spent TFPLUS_OPENCL_TUNE_S
seconds on it (default 1; `inf`: no bound); the rest take the device class's default tile this time and are
tuned by later processes, which find the finished ones in the tuning file. TFPLUS_OPENCL_TUNE=0 never tunes. A
kernel whose tiles are shipped for a few problems only (conv.py's conv3) asks for the nearest problem's tile
instead of tuning (choose's `nearest`), under any bound but `inf`.
A problem's candidates are built all at once on the runtime's build threads before any is timed."""
from __future__ import annotations

import math
import os
import re
import sys
import time

from tfplus import debug

# (TM, TN, TK, WM, WN): a TM x TN tile of C per work-group of (TN/WN) x (TM/WM) threads, TK deep.
GPU_CANDIDATES = [(64, 64, 16, 4, 4), (128, 64, 16, 8, 4), (64, 128, 16, 8, 8), (128, 128, 16, 8, 8),
                  (32, 128, 16, 4, 8), (32, 64, 16, 2, 4), (64, 32, 16, 4, 2), (128, 32, 16, 8, 2)]
GPU_DEFAULT = (64, 64, 16, 4, 4)
# Timing: ROUNDS rounds over a problem's candidates, each about TIMED_S seconds of launches per candidate.
ROUNDS, TIMED_S = 3, 1e-3
# A tile already chosen for a problem of the same kernel and flags is taken when it is this close to the best.
NEAR = 1.05
CPU_TILE = (32, 32, 8, 4, 4)


# Split-K counts work-groups as if every tile were SPLIT_TILE (and cuts the summed dimension into multiples of
# its TK, which every candidate's TK divides): the splits, and so the partial sums' scratch, follow from the
# shapes and the device's compute units alone, which the memory planner knows before anything is tuned.
SPLIT_TILE = (64, 64, 16)
assert all(SPLIT_TILE[2] % c[2] == 0 for c in GPU_CANDIDATES + [CPU_TILE])


def split_k(m: int, n: int, depth: int, compute_units: int, fill: int, least: int) -> tuple[int, int]:
    """(splits, depth of each) of an m x n GEMM's summed dimension `depth`: about `fill` work-groups per
    compute unit, each split at least `least` x TK deep."""
    tm, tn, tk = SPLIT_TILE
    if depth == 0:
        return 1, 0  # an empty sum (a batch of 0 rows' filter gradient): one layer that writes zeros
    tiles = max(1, -(-m // tm) * -(-n // tn))  # max: an empty output (0 rows) has no tile
    splits = max(1, min(fill * compute_units // tiles, depth // (least * tk)))
    per = -(-depth // splits)
    chunk = -(-per // tk) * tk
    return -(-depth // chunk), chunk


def valid(cfg, max_wg: int, local_mem: int, itemsize: int) -> bool:
    tm, tn, tk, wm, wn = cfg
    nt = (tm // wm) * (tn // wn)
    return (nt <= max_wg and nt % tm == 0 and nt % tn == 0 and nt % tk == 0 and (tm * tk) % nt == 0
            and (tn * tk) % nt == 0 and tk * (tm + tn + 2) * itemsize <= local_mem)


def defines(cfg) -> dict:
    return dict(zip(("TM", "TN", "TK", "WM", "WN"), cfg))


def launch_shape(cfg, m: int, n: int, depth: int = 1) -> tuple[tuple, tuple]:
    """(global, local) sizes covering an m x n output (times `depth` splits)."""
    tm, tn, _, wm, wn = cfg
    tx, ty = tn // wn, tm // wm
    return (-(-n // tn) * tx, -(-m // tm) * ty, depth), (tx, ty, 1)


def tune_budget() -> float:
    """Seconds of tuning a process may spend per device (TFPLUS_OPENCL_TUNE_S; see the module's docstring)."""
    try:
        return float(os.environ.get("TFPLUS_OPENCL_TUNE_S", "1"))
    except ValueError:
        raise ValueError(f"TFPLUS_OPENCL_TUNE_S={os.environ['TFPLUS_OPENCL_TUNE_S']!r}: give seconds, e.g. 1 or "
                         "inf") from None


def choose(rt, key: str, itemsize: int, run, candidates=None, nearest: bool = False, fits=None,
           default: tuple = GPU_DEFAULT, cpu: tuple = CPU_TILE) -> tuple:
    """The tile config for `key` on rt's device; `run(cfg)` enqueues the kernel with tile config cfg, one of
    `candidates` (default GPU_CANDIDATES; a kernel with constraints on its tiles passes its own). With `nearest`,
    a problem without a tile takes that of the nearest problem of its kernel and flags that has one (nearest_tile),
    unless tuning is unbounded (TFPLUS_OPENCL_TUNE_S=inf): untimed, and not saved, so such a run tunes it later.
    A kernel whose configs are not GEMM tiles (conv.py's conv3_halo) passes `fits(cfg)` for `valid`, the config
    untuned GPUs take (`default`, one of the candidates) and the CPU device's (`cpu`)."""
    dev = rt.dev
    if not dev.is_gpu:
        return cpu
    if 0 in (_sizes(key) or ()):  # an empty batch: nothing to time, and no log ratio to a tuned size
        return default
    key += "|" + os.environ.get("TFPLUS_OPENCL_BUILD_OPTIONS", "")  # e.g. -cl-opt-disable: other timings
    hit = dev.tuning.get(key)
    local_mem = rt.info["local_mem_bytes"]
    if fits is None:
        def fits(cfg):
            return valid(cfg, dev.max_wg, local_mem, itemsize)
    if hit is not None and fits(tuple(hit)):  # tiles borrowed from another GPU may not fit this one
        return tuple(hit)
    ok = [c for c in candidates or GPU_CANDIDATES if fits(c)]
    near = nearest_tile(dev.tuning, key, ok) if nearest and tune_budget() != float("inf") else None
    if near is not None:
        return near
    if os.environ.get("TFPLUS_OPENCL_TUNE", "1") == "0" or not ok or dev.tune_seconds >= tune_budget():
        return default if default in ok else (ok or [cpu])[0]
    started = time.perf_counter()
    # Each candidate is a program to build: start them all on the build threads, then time them in turn.
    programs = []
    for cfg in ok:
        try:
            programs += dev.programs_of(run, cfg)
        except Exception:  # noqa: BLE001  the timing below meets the error again and skips the candidate
            pass
    dev.prebuild(programs)
    # Timed by the GPU's clock (rt.timing), in rounds over the candidates, each round ~TIMED_S of launches per
    # candidate, the best round kept: a short kernel timed once, or by the host's clock, picks up noise (3
    # launches timed on the host chose tiles up to 40% slower than the best).
    def seconds(cfg, n):
        with rt.timing() as events:
            for _ in range(n):
                run(cfg)
        return sum(ev.profile.end - ev.profile.start for _, ev in events) * 1e-9 / n

    reps, error = {}, None
    for cfg in ok:
        try:
            run(cfg)  # compiles, warms up
            reps[cfg] = max(2, min(20, int(TIMED_S / max(seconds(cfg, 1), 1e-6))))
        except Exception as e:  # noqa: BLE001  a config the device cannot run (resources) is no candidate
            error = e
    if not reps:
        raise RuntimeError(f"no tile configuration of {key} runs on {rt.describe()}; the last error: {error}")
    best_t = {cfg: float("inf") for cfg in reps}
    for _ in range(ROUNDS):
        for cfg, n in reps.items():
            best_t[cfg] = min(best_t[cfg], seconds(cfg, n))
    best = min(best_t, key=best_t.get)
    # A tile some problem of the same kernel and flags already uses is one program less to build on a fresh
    # machine: it wins when it is within NEAR of the best (a cold start pays ~0.1-0.5 s a GEMM program).
    used = {tuple(v) for k, v in dev.tuning.items() if _family(k) == _family(key)}
    near = [c for c in best_t if c in used and best_t[c] <= NEAR * best_t[best]]
    if near:
        best = min(near, key=best_t.get)
    dev.tune_seconds += time.perf_counter() - started
    dev.tuning[key] = list(best)
    dev.save_tuning()
    if debug.on():
        print(f"tfplus: tuned {key}: tile {best} ({best_t[best] * 1e3:.3f} ms)", file=sys.stderr)
    return best


def _sizes(key: str) -> tuple[int, ...] | None:
    """A tuning key's problem size (M, N, K), None where it has none."""
    for f in key.split("|"):
        if re.fullmatch(r"\d+x\d+x\d+(/\d+)?", f):
            return tuple(int(v) for v in f.split("/")[0].split("x"))
    return None


def nearest_tile(tuning: dict, key: str, ok: list) -> tuple | None:
    """The tile (one of `ok`) of the problem in `tuning` of key's family (kernel, dtype, flags) nearest to key's
    size by the sum of |log| ratios of M, N and K (ties: the first key in sorted order); None when there is none.
    A layer at half the tuned batch takes that layer's tile; at a quarter, maybe a deeper layer's whose GEMM is
    as near (Mentee's conv4 forward at 32 images, 64 x 8192 x 576, takes conv5's at 128, 128 x 8192 x 576)."""
    size, family = _sizes(key), _family(key)
    if size is None:
        return None
    best, best_d = None, float("inf")
    for k, tile in sorted(tuning.items()):
        other = _sizes(k)
        if other is None or _family(k) != family or tuple(tile) not in ok:
            continue
        d = sum(abs(math.log(a / b)) for a, b in zip(size, other))
        if d < best_d:
            best, best_d = tuple(tile), d
    return best


def _family(key: str) -> tuple:
    """A tuning key without its problem size (MxNxK, and a filter gradient's /divisor): the kernel, dtype and
    flags, whose tiles are programs of one kind."""
    return tuple(f for f in key.split("|") if not re.fullmatch(r"\d+x\d+x\d+(/\d+)?", f))
