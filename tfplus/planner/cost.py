"""The planner's cost model: a candidate plan's step time predicted from what the step does (its features: kernel
calls, executor runs, GEMM FLOPs, elements written, ...), apart from the search that measures the features
(planner.plan._Step.features) and ranks the candidates by it.

    >>> CostModel("cpu").time(dict.fromkeys(FEATURES, 0.0) | {"calls": 1000})
    0.014
"""
from __future__ import annotations

import math

from tfplus import flops
from tfplus.framework import Operation
from tfplus.planner import chunking
from tfplus.registry import has_tag

# What the model weighs, one number each (CostModel.WEIGHTS says what each counts).
FEATURES = ("calls", "host_calls", "conv_calls", "small_calls", "runs", "flops", "elements", "pieces", "compact",
            "divided")
# A conv kernel call on fewer images than this per thread leaves the cpu kernels' fast paths (their tasks take 8
# images at least): the cost model prices such calls apart (CostModel, `small_calls`).
SMALL_CALL_IMAGES = 8
# Ops that launch no kernel whatever their tags say (CostModel, `host_calls`): a constant's value is placed once.
_NO_KERNEL = frozenset({"Const", "NoOp"})


class CostModel:
    """Predicts step time as a weighted sum of what the step does (`_Step.features`): seconds per kernel call,
    per executor run (a micro-batch or the update run), per GEMM FLOP (convolutions and matmuls), per element
    other ops write, per piece the conv kernels cut a call into (set-up, padding, transforms and a smaller
    GEMM per piece), per element a compact max-pool reads (its argmax pass, less what MaxPoolGrad and ReluGrad
    then save). Fitted by least squares (flops and elements fixed from the unconstrained step) to 14 Mentee
    steps on the 2-core box (NumPy on OpenBLAS, one thread), batch 128 under 1-16 micro-batches, 1-2 conv
    chunks, compact or not, scratch divisors 1-16; the free fit put negative weights on executor runs and
    compaction (collinear with calls), so both are 0, and the per-call weight was then lowered by hand. The
    model ranks plans well but overstates overheads: predicted +21% / +42% where 32MB / 24MB measured +3% /
    +11% (benchmarks/bench_memory.py). Refitted by hand on 2026-11-24, once the compiled executor had cut the
    host cost of a call and the streamed prefix had brought plans of many calls (Mentee fine-tuning step, batch
    128, one thread, 16 MB; `tfplus plan`'s candidates forced and timed in turns): 16 micro-batches of 8 images
    cost +2.5-3.9% for 441 more calls (so ~14 us a call, 50 us a conv call, not 120 / 950 us); a conv call on
    fewer than SMALL_CALL_IMAGES images leaves the cpu kernels' fast paths (their tasks take 8 images at least:
    kernels/numpy/conv.py `_fast_grain`; chunks of 2 images cost +35%): `small_calls`, 300 us each; `pieces`
    counts the cuts a kernel makes beyond one piece per call (scratch divisor 16: +37%), 300 us each.

    On opencl the executor was host-bound (a GPU finishes a kernel before Python has launched the next), so a
    step cost its kernel calls: on the H100 that predicts +233% / +544% where 32MB / 24MB
    (4 / 8 micro-batches) measured +231% / +574% over the unconstrained plan. Once the GPU's kernel time
    matched the host's (2026-11-24), the scratch divisor showed a GPU cost the launch count misses: at divisor 4
    the filter gradients took 1.00 ms instead of 0.50 ms a step (H100, `tfplus profile --memory-budget 64MB
    --trace`), hence `divided`, the filter gradients' FLOPs under a divisor. (The cpu's divisor cost is in
    `pieces`.)

    Refitted on 2026-11-24 once planned steps replayed their recorded launches (tfplus.runtime.opencl._Tape): a
    launch costs the host ~12 us, so a step is about its GPU time and a micro-batch adds its launches. On the H100
    (Mentee, batch 128, `benchmarks/bench_plan_candidates.py --budgets 32MB,24MB`: each fitting candidate timed
    in turns) the unconstrained step took 2.5 ms (1.9 ms of kernels), 2 micro-batches +46-51%, 4 micro-batches
    +115-148%, and a divisor d made the filter gradients about d times as slow (d 4 -> 8 -> 16: +0.77 / +1.72
    ms), so `divided` counts their FLOPs times d - 1: 12 us a launch, 7e-14 s per GEMM FLOP, 2.6e-14 s per
    divided FLOP. Predicted +66% / +149% for the plans chosen at 32MB / 24MB, measured +46-55% / +115-151%.
    Giving the filter gradients away from the peak their whole split back (a divisor of their own) was tried:
    predicted 7% cheaper, measured -2.5% to +5.7%, so it was left out.

    `host_calls` are the ops that launch no kernel (views, shape-only values, constants, no-ops): the cpu executor
    visits each like any call, a replayed OpenCL tape holds none of them. Counted as calls on opencl, they were
    53 of Mentee's 100 (the H200 launched 47) and the model put +34% / +102% on 32MB / 24MB where the H200 measured
    +32% / +69% (stop 44); without them, +25% / +73%.

    Refitted on the H200 (2026-11-29; BENCHMARKS.md, "Mentee under 32 and 24 MB on the H200: launches and passes"):
    nine Mentee candidates of 32 and 24 MB (2 and 4 micro-batches of the whole step; prefixes to pool1 and pool2 in
    2 and 4, kept argmax, recomputation, divisors 4 and 8) timed in turns against the plain step, their kernels
    profiled. Two launch counts were wrong: a micro-batch's gradient merges (a launch a micro-batch, uncounted
    without statistics passes) and a streamed prefix's weight-gradient sums (one launch a micro-batch, counted a
    call per gradient: 32 for the prefix to pool2 in 4). With them counted and the weights fitted by non-negative
    least squares, 18 us a launch, 4.6e-14 s per GEMM FLOP and 1e-14 s per divided FLOP, no extra for a conv
    call, the model is within 8 points of each measurement (before: up to 53) and ranks the prefix to pool2 in 4
    (+57% measured) before 4 micro-batches of the whole step (+74%), which it had put 30 points the other way."""

    WEIGHTS = {"calls": 1.4e-5, "host_calls": 1.4e-5, "conv_calls": 5e-5, "small_calls": 3e-4, "runs": 0.0,
               "flops": 2.2e-11, "elements": 1.5e-9, "pieces": 3e-4, "compact": 0.0, "divided": 0.0}
    OPENCL_WEIGHTS = {"calls": 1.8e-5, "host_calls": 0.0, "conv_calls": 0.0, "small_calls": 0.0, "runs": 0.0,
                      "flops": 4.6e-14, "elements": 0.0, "pieces": 0.0, "compact": 0.0, "divided": 1e-14}

    def __init__(self, device: str, weights: dict | None = None):
        default = self.OPENCL_WEIGHTS if device == "opencl" else self.WEIGHTS
        self.device, self.weights = device, dict(weights or default)
        self.basis = (f"{self.weights['calls'] * 1e6:.0f} us per replayed kernel launch and the GPU's GEMM FLOPs"
                      if device == "opencl"
                      else "GEMM FLOPs, elements written and kernel calls, fitted on a 2-core cpu")

    def time(self, features: dict) -> float:
        return sum(self.weights[k] * v for k, v in features.items())


def matmul_flops(op: Operation, specs) -> float:
    """The FLOPs of a matrix product (tfplus.flops.MATRIX_PRODUCTS), else 0: the cost model charges other ops
    by the elements they write."""
    if not flops.is_matrix_product(op.type):
        return 0.0
    return flops.of(op.type, [specs[t].shape for t in op.inputs], [specs[t].shape for t in op.outputs], op.attrs)


def count(f: dict, convs: list, times: int, op: Operation, specs) -> None:
    """Adds what `times` calls of `op` do to the features `f`; convolutions go to `convs` (chunking)."""
    gemm = matmul_flops(op, specs)
    f["flops"] += times * gemm
    if not gemm:
        f["elements"] += times * sum(math.prod(specs[o].shape) for o in op.outputs)
    if op.type in chunking.CHUNKABLE:
        convs.append((times, op, specs, specs[op.inputs[chunking.CHUNKABLE[op.type][0][0]]].shape[0]))
    elif op.type in _NO_KERNEL or has_tag(op.type, "view") or has_tag(op.type, "shape_only"):
        f["host_calls"] += times
    else:
        f["calls"] += times
