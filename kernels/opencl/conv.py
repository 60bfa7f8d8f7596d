"""OpenCL kernels for Conv2D, Conv2DBackpropInput and Conv2DBackpropFilter: implicit GEMMs (conv.cl on the
tile engine of gemm.cl) reading NCHW or NHWC tensors through strides, with per-device autotuned tiles.

Each filter tap's read offset comes from a small table built on the host once per geometry (and kept on the
device), so the inner loop does no index division. The input gradient of a stride-1 conv is a conv of dy with
the flipped filter; of a strided conv, the same gather keeping only the taps that land on a dy element.
The filter gradient splits its long reduction (batch x positions) over work-groups and sums the partials,
which are kernel scratch (ctx.workspace) declared for the memory planner.

The graph rewrite's backward folds run here too: _FusedConv2DBackpropInputReluGrad is the input gradient with the
ReLU's mask in its epilogue, _FusedConv2DBackpropFilterBiasAddGrad the filter gradient with a GEMM row of ones
whose sums are the bias gradient.

On a GPU the 3x3 stride-1 SAME convolutions run kernels of their own (conv.cl's conv3_halo, a direct convolution
over staged input rows, for the forwards and input gradients; conv3_wgrad with vector register tiles for the filter
gradients; see VARIANTS). TFPLUS_CONV_VARIANTS overrides the device's default: `none` (or empty) runs the
general kernels, a comma list of VARIANTS' names runs those (on a CPU device too).
"""
from __future__ import annotations

import functools
import itertools
import math
import os

import numpy as np
import pyopencl.cltypes as cltypes

from tfplus.kernels.opencl import _tune
from tfplus.kernels.opencl._common import contiguous_strides, kernel, register
from tfplus.kernels.opencl.reduce import (
    FINISH_CHUNKS,
    done_counters,
    finishes,
    finishes_splits,
    partials,
    reduce,
    split_scratch,
    tile_counters,
)
from tfplus.registry import register_workspace
from tfplus.runtime.opencl import int8
from tfplus.tensor_shape import conv_output

SRC = ("gemm.cl", "conv.cl")
F = ("float32", "float64")


class _Geom:
    """One convolution's sizes in NHWC terms, its pads, and the element strides of a tensor in its format."""

    def __init__(self, x_shape, f_shape, attrs):
        self.nchw = attrs.get("data_format", "NHWC") == "NCHW"
        n, h, w, c = self.nhwc(x_shape)
        self.n, self.h, self.w, self.cin = n, h, w, c
        self.kh, self.kw, _, self.cout = (int(d) for d in f_shape)
        st = list(attrs["strides"])
        self.sh, self.sw = (st[2], st[3]) if self.nchw else (st[1], st[2])
        self.oh, self.ph, _ = conv_output(h, self.kh, self.sh, attrs["padding"])
        self.ow, self.pw, _ = conv_output(w, self.kw, self.sw, attrs["padding"])

    def nhwc(self, shape):
        return (shape[0], shape[2], shape[3], shape[1]) if self.nchw else tuple(shape)

    def strides(self, shape):
        """(batch, channel, row, col) element strides of a contiguous tensor of `shape` in this format."""
        s = contiguous_strides(shape)
        return (s[0], s[1], s[2], s[3]) if self.nchw else (s[0], s[3], s[1], s[2])


def _attrs_key(attrs) -> tuple:
    return tuple(attrs["strides"]), attrs["padding"], attrs.get("data_format", "NHWC"), _divisor(attrs)


# The memory planner's scratch divisor (tfplus.planner.chunking.SCRATCH_ATTR, the cpu kernels' attr of the same
# name): the filter gradient splits its long sum over 1/divisor as many work-group columns, so its partial
# sums, its only scratch, shrink by about that much, at the same number of launches.
SCRATCH_DIVISOR_ATTR = "_scratch_divisor"


def _divisor(attrs) -> int:
    return int(attrs.get(SCRATCH_DIVISOR_ATTR, 1))


# Variants of the 3x3, stride-1, SAME convolutions (all of Mentee's but the first forward), issue 37:
#   fwd3x3  Conv2D and _FusedConv2DBiasRelu on conv.cl's conv3 (taps and channels compile-time, no tap table),
#   dx3x3   Conv2DBackpropInput on conv3 with the flipped filter,
#   dw3x3   Conv2DBackpropFilter on conv3_wgrad,
#   vtile   those three with gemm.cl's vector register tiles (VTILE), tuned over VTILE_CANDIDATES,
#   dwfinish  conv3_wgrad finishes its split sums in the kernel whatever their number (WGRAD_FINISH_LOADS: no
#           second pass, a launch less; the pass's partials are declared scratch all the same). Not measured yet.
#   halo    Conv2D, _FusedConv2DBiasRelu, Conv2DBackpropInput and its ReLU fold on conv.cl's conv3_halo (stop 45),
#           ahead of fwd3x3 / dx3x3: a direct convolution over input rows staged once with their halo, tuned over
#           _halo_candidates. It does not split its sums (their scratch stays declared, unused).
#   dwhalo  Conv2DBackpropFilter (not the bias fold) on conv.cl's conv3_wgrad_halo (stop 45), ahead of dw3x3: the
#           same staging for the filter gradient, tuned over _dwhalo_candidates; the same splits and scratch, the
#           split sums always added up by a second pass.
#   dwtile  Conv2DBackpropFilter (not the bias fold) on conv.cl's conv3_wgrad_tile (stop 46), ahead of dwhalo and dw3x3:
#           a register-tiled GEMM whose 9 taps x TCI rows read one staged block of input rows a strip, split layers
#           capped at DWTILE_SCRATCH_BYTES (not growing with the compute units) and finished in the kernel; an RGB
#           layer's 3 channels too. Tuned over _dwtile_candidates. Slower than conv3_wgrad on the H200 (0.47 against
#           0.36 ms a step; BENCHMARKS.md, "Mentee filter gradients and micro-batch convolutions"): a switch, off.
#   halokg  with halo: its forwards and input gradients tuned over _halokg_candidates, which add configs of smaller
#           work-groups in 2 or 4 channel groups (conv3_halo's KG: their sums added in local memory, no scratch), for
#           the few output tiles of a micro-batch's small layers (stop 46). Tuned apart from halo. On the H200 the
#           passes at 32 images took 0.358 ms for halo's 0.388 (conv5's input gradient 0.021 for 0.036), at 64 0.537
#           for 0.549, at 128 the same: a GPU's default since stop 46 (its H200 tiles shipped).
# Same splits, scratch and order of each sum as the kernels they replace; a shape they do not cover (another
# filter, a stride, a channel count conv3 cannot slice by K) keeps the general kernel.
# A GPU runs GPU_VARIANTS unless TFPLUS_CONV_VARIANTS says otherwise (a comma list of the names above; empty or
# `none`: the general kernels). On one H200 they took Mentee's conv passes at batch 128 from 1.42 to 0.99 ms and
# its whole step from 2.18 to 1.71 ms (BENCHMARKS.md, "Mentee conv kernel variants"); halo the forwards and input
# gradients from 0.776 to 0.505 ms and the step from 1.77 to 1.54 ms ("Mentee conv kernels nearer the peak"). A
# CPU device (PoCL) keeps the general kernels (on a loaded 2-core box the variants' passes took less in total, but
# not each of them). The H200's tiles for the vtile and halo kernels are shipped (tuning-gpu.json); a problem
# without a tile takes that of the
# nearest tuned problem of its kernel (_tune.choose `nearest`) instead of timing a dozen candidate programs during
# a first step.
VARIANTS = ("fwd3x3", "dx3x3", "dw3x3", "vtile", "dwfinish", "halo", "dwhalo", "dwtile", "halokg")
GPU_VARIANTS = frozenset({"fwd3x3", "dx3x3", "dw3x3", "vtile", "halo", "halokg"})
# VTILE needs WM and WN multiples of 4: the general candidates that are, shallower ones (TK 8), and shapes for
# Mentee's narrow sides (32 output channels forward, 32 input channels in dx, 32 or 64 columns in a filter gradient).
VTILE_CANDIDATES = [c for c in _tune.GPU_CANDIDATES if c[3] % 4 == 0 and c[4] % 4 == 0] + \
    [(64, 64, 8, 4, 4), (128, 64, 8, 8, 4), (128, 128, 8, 8, 8), (64, 32, 16, 4, 4), (32, 64, 16, 4, 4),
     (128, 32, 16, 8, 4), (32, 32, 16, 4, 4), (32, 256, 16, 4, 8)]
# conv3 takes a K slice of one tap: the channels summed per tap must be a multiple of every candidate's TK.
_CONV3_CHANNELS = 16


def variants(rt) -> frozenset:
    """The conv variants rt's device runs: TFPLUS_CONV_VARIANTS when set, else GPU_VARIANTS on a GPU, none on
    a CPU device. `TFPLUS_CONV_VARIANTS=none tfplus train --device opencl` runs the general kernels on a GPU;
    `TFPLUS_CONV_VARIANTS=fwd3x3,dx3x3,dw3x3,vtile,dwfinish` adds dwfinish."""
    raw = os.environ.get("TFPLUS_CONV_VARIANTS")
    if raw is None:
        return GPU_VARIANTS if rt.dev.is_gpu else frozenset()
    return _parse_variants(raw)


@functools.lru_cache(maxsize=8)
def _parse_variants(raw: str) -> frozenset:
    got = frozenset(v.strip() for v in raw.split(",") if v.strip()) - {"none"}
    if got - set(VARIANTS):
        raise ValueError(f"TFPLUS_CONV_VARIANTS={raw!r}: {sorted(got - set(VARIANTS))} unknown; give a comma list "
                         f"of {', '.join(VARIANTS)} (or none: the general kernels; unset: the device's default)")
    return got


def _is3x3(g: "_Geom") -> bool:
    """A 3x3 conv with stride 1 and a pad of 1 (SAME): the output is as large as the input."""
    return (g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.oh, g.ow) == (3, 3, 1, 1, 1, 1, g.h, g.w)


def _tiles(v) -> tuple[dict, list | None, str]:
    """The VTILE define, tile candidates and tuning-key tag of a conv3 / conv3_wgrad under variants `v`."""
    return ({"VTILE": 1}, VTILE_CANDIDATES, "v") if "vtile" in v else ({}, None, "")


def _splits(m: int, n: int, k: int, compute_units: int) -> tuple[int, int]:
    """(layers, k per layer) of a conv.cl `conv` GEMM: an output of fewer tiles than the device has compute
    units (Mentee's last conv at a micro-batch of 32 or 64: 32-64 tiles for 132 on the H100, each 1152 taps
    deep) splits its sum to fill them, each layer at least 8 K slices deep; larger ones do not split."""
    return _tune.split_k(m, n, k, compute_units, 1, 8)


def _split_scratch(m: int, n: int, k: int, dtype, compute_units: int) -> list[tuple]:
    """The layers a split `conv` asks for (the last layer of each tile adds them up: no second pass)."""
    splits = _splits(m, n, k, compute_units)[0]
    return [((splits, m * n), dtype)] if splits > 1 else []


def _conv(rt, kind: str, out, x, w, tab, m: int, n: int, k: int, out_hw, in_hw, xs, os_, stride, pad,
          sam: int, divisors, a_k_fast: bool, b_k_fast: bool, strided: bool, epilogue: int = 0, bias=None):
    """The launch plan (kernel, global, local, scalar arguments, layers) of one conv.cl `conv` call, tuned;
    `epilogue` 1 / 2 adds `bias` and applies Relu / Relu6 (conv.cl EPILOGUE)."""
    flags = {"A_K_FAST": int(a_k_fast), "B_K_FAST": int(b_k_fast), "STRIDED": int(strided)}
    # The epilogue costs next to nothing beside the GEMM: the plain conv's tiles serve (one tuning key).
    more = {"EPILOGUE": epilogue} if epilogue else {}
    i32 = np.int32
    scalars = tuple(i32(v) for v in (m, n, k, *out_hw, *in_hw, xs[0], xs[2], xs[3], *os_, *stride, *pad, sam,
                                      *divisors))

    def make(cfg):
        g, loc, splits, chunk = _split_launch(rt, cfg, m, n, k)
        return kernel(rt, SRC, "conv", out.dtype, **flags, **more, **_tune.defines(cfg)), g, loc, (tab,), \
            scalars + (i32(chunk),), splits

    def run(cfg):
        _run_conv(rt, make(cfg), out, x, w, bias)

    key = f"{kind}|{out.dtype.name}|{''.join(str(v) for v in flags.values())}|{m}x{n}x{k}"
    return make(_tune.choose(rt, key, out.dtype.itemsize, run))


def _split_launch(rt, cfg, m: int, n: int, k: int) -> tuple:
    """(global, local, splits, chunk) of an implicit-GEMM conv of tile `cfg`: K split only where the last group
    of a tile can finish the sums (reduce.finishes)."""
    splits, chunk = _splits(m, n, k, rt.info["compute_units"])
    if not finishes(rt, splits, cfg):
        splits, chunk = 1, k
    g, loc = _tune.launch_shape(cfg, m, n, splits)
    return g, loc, splits, chunk


def _conv3(rt, v, kind: str, out, x, w, m: int, n: int, cin: int, hw, xs, os_, flip: bool, epilogue: int = 0,
           bias=None):
    """The launch plan of conv.cl's conv3 (a 3x3 stride-1 SAME Conv2D, or with `flip` the input gradient of one)
    under variants `v`, tuned as _conv's: the same split K, so the same scratch."""
    vt, candidates, tag = _tiles(v)
    flags = {"A_K_FAST": int(flip), "B_K_FAST": int(xs[1] == 1), "FLIP": int(flip), "CIN": cin, **vt}
    more = {"EPILOGUE": epilogue} if epilogue else {}
    k = 9 * cin
    i32 = np.int32
    scalars = tuple(i32(v) for v in (m, n, *hw, xs[0], xs[1], xs[2], xs[3], *os_))

    def make(cfg):
        g, loc, splits, chunk = _split_launch(rt, cfg, m, n, k)
        return kernel(rt, SRC, "conv3", out.dtype, **flags, **more, **_tune.defines(cfg)), g, loc, (), \
            scalars + (i32(chunk),), splits

    def run(cfg):
        _run_conv(rt, make(cfg), out, x, w, bias)

    key = f"{kind}{tag}|{out.dtype.name}|{flags['A_K_FAST']}{flags['B_K_FAST']}|{m}x{n}x{k}"
    return make(_tune.choose(rt, key, out.dtype.itemsize, run, candidates, nearest=True))


# conv3_halo's configs are (TM, ROWS, CC, WM, WN): TM output channels of ROWS image rows a work-group, CC channels
# summed a stage, WM channels x WN columns a work-item. The CPU device (PoCL) takes HALO_CPU_TILE (rows and
# channels cut to the problem's).
HALO_CPU_TILE = (16, 2, 8, 4, 4)
HALOKG_CPU = 2  # halokg's channel groups on PoCL
HALO_PREFETCH = 48


def _halo_fits(cfg, cin: int, iw: int, max_wg: int, local_mem: int, itemsize: int) -> bool:
    """Whether conv3_halo builds and runs with `cfg` summing `cin` channels of `iw`-wide rows: vector runs of 4,
    whole stages, the work-group and its local tiles within the device's limits; with a channel-group count (a
    halokg config's sixth), whole groups a stage and the groups' sums within the staged inputs' local memory."""
    tm, rows, cc, wm, wn = cfg[:5]
    kg = cfg[5] if len(cfg) > 5 else 1
    iwp = -(-iw // wn) * wn
    xrow = iwp + 8 if (iwp + 8) % 8 else iwp + 12  # conv.cl's XROW and WROW
    local = cc * ((rows + 2) * xrow + 9 * tm + 4) * itemsize
    return (wm % 4 == 0 and wn % 4 == 0 and tm % wm == 0 and cin % cc == 0 and cc % kg == 0 and
            tm // wm * (rows * iwp // wn) * kg <= max_wg and local <= local_mem and
            (kg == 1 or tm * rows * iwp <= cc * (rows + 2) * xrow))


def _halo_candidates(m: int, ih: int, iw: int) -> list[tuple]:
    """GPU configs for m output channels of ih x iw images: 32-256 positions (whole rows, no more than the image
    has) and 64-256 work-items a group, 8 or 16 channels a stage, no wider in channels than m needs, and at most
    HALO_PREFETCH values a work-item staged a stage (the registers that hold the next stage: more spill)."""
    out = []
    for tm, rows, cc, wm, wn in itertools.product((32, 64, 128), (1, 2, 4, 8, 16), (8, 16), (4, 8), (4, 8)):
        positions = rows * -(-iw // wn) * wn
        items = tm // wm * positions // wn
        staged = -(-cc * (rows + 2) * positions // rows // items) + -(-cc * 9 * tm // items)
        if 32 <= positions <= 256 and rows <= ih and 64 <= items <= 256 and tm < m + 32 and staged <= HALO_PREFETCH:
            out.append((tm, rows, cc, wm, wn))
    return out


def _halokg_candidates(m: int, ih: int, iw: int) -> list[tuple]:
    """The `halokg` variant's GPU configs: halo's (one channel group), and work-groups of 32-128 work-items (few
    outputs a work-group: a micro-batch's small layers fill more compute units) times 2 or 4 channel groups, 64-512
    work-items in all."""
    out = [(*c, 1) for c in _halo_candidates(m, ih, iw)]
    for tm, rows, cc, wm, wn, kg in itertools.product((32, 64), (1, 2, 4, 8), (8, 16), (4, 8), (4, 8), (2, 4)):
        positions = rows * -(-iw // wn) * wn
        items = tm // wm * positions // wn
        staged = -(-cc * (rows + 2) * positions // rows // (items * kg)) + -(-cc * 9 * tm // (items * kg))
        if (16 <= positions <= 128 and rows <= ih and 32 <= items <= 128 and 64 <= items * kg <= 512 and
                tm < m + 32 and staged <= HALO_PREFETCH):
            out.append((tm, rows, cc, wm, wn, kg))
    return out


def _halo_default(candidates: list, m: int, iw: int) -> tuple | None:
    """An untuned GPU's config: one channel group (halo's), 64 channels (32 where m is narrower), the most outputs a
    work-item, about 128 positions, 8 channels a stage."""
    want = 64 if m >= 64 else 32
    return min(candidates, key=lambda c: (c[5:] not in ((), (1,)), abs(c[0] - want), -c[3] * c[4],
                                          abs(c[1] * iw - 128), c[2]), default=None)


def _halo(rt, kind: str, out, x, w, m: int, cin: int, hw, xs, os_, flip: bool, epilogue: int = 0, bias=None,
          kg: bool = False):
    """The launch plan of conv.cl's conv3_halo (a 3x3 stride-1 SAME Conv2D, or with `flip` the input gradient of
    one, of m output channels summing cin), tuned; None where no config fits (conv3 runs it then). With `kg`
    (variant halokg) over _halokg_candidates, tuned apart."""
    ih, iw = hw
    dt = out.dtype

    def fits(cfg):
        return _halo_fits(cfg, cin, iw, rt.dev.max_wg, rt.info["local_mem_bytes"], dt.itemsize)

    tm, rows, cc, wm, wn = HALO_CPU_TILE
    cpu = (tm, min(rows, ih), math.gcd(cc, cin), wm, wn)
    candidates = _halo_candidates(m, ih, iw)
    if kg:
        cpu = (*cpu, HALOKG_CPU if cpu[2] % HALOKG_CPU == 0 else 1)
        candidates = _halokg_candidates(m, ih, iw)
    if not (any(fits(c) for c in candidates) if rt.dev.is_gpu else fits(cpu)):
        return None
    flags = {"FLIP": int(flip), "CIN": cin, "IW": iw}
    more = {"EPILOGUE": epilogue} if epilogue else {}
    scalars = tuple(np.int32(v) for v in (m, ih, *xs, *os_))
    batch = out.shape[0]

    def make(cfg):
        tm, rows, cc, wm, wn = cfg[:5]
        groups = cfg[5] if len(cfg) > 5 else 1
        tx, ty = rows * -(-iw // wn) * wn // wn, tm // wm
        kgs = {"KG": groups} if groups > 1 else {}  # one group: halo's own programs
        kern = kernel(rt, SRC, "conv3_halo", dt, **flags, **more, TM=tm, ROWS=rows, CC=cc, WM=wm, WN=wn, **kgs)
        return kern, (batch * -(-ih // rows) * tx, -(-m // tm) * ty, groups), (tx, ty, groups), scalars

    def run(cfg):
        _run_halo(rt, make(cfg), out, x, w, bias)

    key = f"{kind}h{'k' if kg else ''}|{dt.name}|{int(flip)}{int(xs[3] == 1)}|w{iw}|{m}x{batch * ih * iw}x{9 * cin}"
    return make(_tune.choose(rt, key, dt.itemsize, run, candidates, nearest=True, fits=fits,
                             default=_halo_default([c for c in candidates if fits(c)], m, iw), cpu=cpu))


def _run_halo(rt, plan, out, x, w, bias=None, workspace=None) -> None:
    kern, g, loc, scalars = plan
    rt.run(kern, g, loc, out, x, w, bias, *scalars)


# Forward convs whose reduction (kh * kw * cin) is at most this run conv.cl's conv_small, not the GEMM: its taps
# fit a work-item's registers. On the H100, Mentee's first layer (3x3 RGB -> 32, bias and ReLU) took 38-41 us as
# the tuned GEMM and 31-32 us so at batch 128, 25-27 / 21-22 us at 64, 19 / 15 us at 32, and its program builds
# no slower. No tuning: a work-item per output position; two per item, or groups of 64 or 256, did no better.
SMALL_K = 32
SMALL_LOCAL = 128


def _small(rt, dt, g: _Geom, xs, os_, epilogue: int):
    """The launch plan of conv.cl's conv_small: work-items over output positions, CB output channels each."""
    cb = min(g.cout, 32)
    more = {"EPILOGUE": epilogue} if epilogue else {}
    kern = kernel(rt, SRC, "conv_small", dt, KH=g.kh, KW=g.kw, CIN=g.cin, CB=cb, LOCAL=SMALL_LOCAL, **more)
    n = g.n * g.oh * g.ow
    scalars = tuple(np.int32(v) for v in (g.cout, n, g.oh, g.ow, g.h, g.w, *xs, *os_, g.sh, g.sw, g.ph, g.pw))
    return kern, (-(-n // SMALL_LOCAL) * SMALL_LOCAL, -(-g.cout // cb)), (SMALL_LOCAL, 1), scalars


def _run_small(rt, plan, out, x, w, bias=None, workspace=None) -> None:
    kern, g, loc, scalars = plan
    rt.run(kern, g, loc, out, x, w, bias, *scalars)


def _run_conv(rt, plan, out, x, w, bias=None, workspace=None) -> None:
    kern, g, loc, tab, scalars, splits = plan  # tab: (the tap table,), or () for conv3
    layers = done = None
    if splits > 1:
        layers = (workspace or rt.allocate)((splits, out.size), out.dtype)
        done = tile_counters(rt, g, loc)
    rt.run(kern, g, loc, out, x, w, *tab, bias, layers, done, *scalars)


@register("Conv2D", F)
def _conv2d(ctx, ins, outs, attrs):
    _forward(ctx.runtime, *ins, outs[0], attrs, workspace=ctx.workspace)


@register("_FusedConv2DBiasRelu", F)
def _fused_conv2d_bias_relu(ctx, ins, outs, attrs):
    x, f, b = ins
    _forward(ctx.runtime, x, f, outs[0], attrs, b, 1 if attrs["activation"] == "Relu" else 2, ctx.workspace)


@register_workspace("_FusedConv2DBiasRelu", "opencl")
@register_workspace("Conv2D", "opencl")
def _forward_scratch(ins, attrs, compute_units):
    """A forward conv's split layers (conv_small does not split)."""
    x, f = ins[:2]
    g = _Geom(x.shape, f.shape, attrs)
    kd = g.kh * g.kw * g.cin
    return [] if kd <= SMALL_K else _split_scratch(g.cout, g.n * g.oh * g.ow, kd, x.dtype, compute_units)


def _forward(rt, x, f, out, attrs, bias=None, epilogue: int = 0, workspace=None) -> None:
    """Conv2D, or with `epilogue` (conv.cl EPILOGUE) the bias and activation added as the output is written."""
    key = ("Conv2D", x.shape, f.shape, x.dtype, _attrs_key(attrs), epilogue, variants(rt))
    plan = rt.plans.get(key)
    if plan is None:
        g = _Geom(x.shape, f.shape, attrs)
        xs, os_ = g.strides(x.shape), g.strides(out.shape)

        def table():  # k = (kh, kw, ci): filter row k*cout, input offset of that tap
            kh, kw, ci = np.meshgrid(np.arange(g.kh), np.arange(g.kw), np.arange(g.cin), indexing="ij")
            k = (kh * g.kw + kw) * g.cin + ci
            return np.stack([k * g.cout, ci * xs[1] + kh * xs[2] + kw * xs[3], kh, kw], -1).reshape(-1, 4)

        kd = g.kh * g.kw * g.cin
        halo = "halo" in key[-1] and _is3x3(g) and kd > SMALL_K and \
            _halo(rt, "conv3_fwd", out, x, f, g.cout, g.cin, (g.h, g.w), xs, os_, False, epilogue, bias,
                  "halokg" in key[-1])
        if kd <= SMALL_K:
            plan = rt.plans[key] = (_run_small, _small(rt, out.dtype, g, xs, os_, epilogue))
        elif halo:
            plan = rt.plans[key] = (_run_halo, halo)
        elif "fwd3x3" in key[-1] and _is3x3(g) and g.cin % _CONV3_CHANNELS == 0:
            plan = rt.plans[key] = (_run_conv, _conv3(rt, key[-1], "conv3_fwd", out, x, f, g.cout, g.n * g.oh * g.ow,
                                                      g.cin, (g.h, g.w), xs, os_, False, epilogue, bias))
        else:
            tab = rt.table(("conv", g.kh, g.kw, g.cin, g.cout, xs[1:]), lambda: table().astype(np.int32))
            plan = rt.plans[key] = (_run_conv, _conv(
                rt, "conv_fwd", out, x, f, tab, g.cout, g.n * g.oh * g.ow, kd, (g.oh, g.ow), (g.h, g.w), xs, os_,
                (g.sh, g.sw), (g.ph, g.pw), 1, (1, 1), False, xs[1] == 1, False, epilogue, bias))
    run, launch = plan
    run(rt, launch, out, x, f, bias, workspace)


@register("Conv2DBackpropInput", F)
def _conv2d_backprop_input(ctx, ins, outs, attrs):
    _backprop_input(ctx, ins, outs[0], attrs)


@register("_FusedConv2DBackpropInputReluGrad", F)
def _fused_dx_relu_grad(ctx, ins, outs, attrs):
    """The input gradient with the ReLU's gradient mask at features ins[3] applied as it is written (EPILOGUE 3,
    4 for Relu6)."""
    _backprop_input(ctx, ins[:3], outs[0], attrs, ins[3], 3 if attrs["activation"] == "Relu" else 4)


@register_workspace("_FusedConv2DBackpropInputReluGrad", "opencl")
def _fused_dx_scratch(ins, attrs, compute_units):
    return _dx_scratch(ins[:3], attrs, compute_units)


def _backprop_input(ctx, ins, dx, attrs, features=None, epilogue: int = 0) -> None:
    rt, (_, f, dy) = ctx.runtime, ins
    key = ("Conv2DBackpropInput", dx.shape, f.shape, dy.shape, dx.dtype, _attrs_key(attrs), epilogue, variants(rt))
    plan = rt.plans.get(key)
    if plan is None:
        plan = rt.plans[key] = _dx_plan(rt, dx, f, dy, attrs, key[-1], epilogue, features)
    run, launch = plan
    run(rt, launch, dx, dy, f, features, ctx.workspace)


def _dx_plan(rt, dx, f, dy, attrs, v, epilogue: int = 0, features=None):
    """Conv2DBackpropInput's (runner, launch plan): conv3_halo flipped when halo (in variants `v`) covers it, conv3
    flipped when dx3x3 does, else the general conv; `epilogue` 3 / 4 masks it by a ReLU's / Relu6's gradient at
    `features` (conv.cl EPILOGUE)."""
    g = _Geom(dx.shape, f.shape, attrs)
    ds, xs = g.strides(dy.shape), g.strides(dx.shape)
    halo = "halo" in v and _is3x3(g) and \
        _halo(rt, "conv3_dx", dx, dy, f, g.cin, g.cout, (g.h, g.w), ds, xs, True, epilogue, features, "halokg" in v)
    if halo:
        return _run_halo, halo
    if "dx3x3" in v and _is3x3(g) and g.cout % _CONV3_CHANNELS == 0:
        return _run_conv, _conv3(rt, v, "conv3_dx", dx, dy, f, g.cin, g.n * g.h * g.w, g.cout, (g.h, g.w), ds, xs,
                                 True, epilogue, features)
    strided = (g.sh, g.sw) != (1, 1)

    def table():  # k = (kh', kw', co) over the flipped filter: filter offset, dy offset of that tap
        kh, kw, co = np.meshgrid(np.arange(g.kh), np.arange(g.kw), np.arange(g.cout), indexing="ij")
        a = ((g.kh - 1 - kh) * g.kw + (g.kw - 1 - kw)) * g.cin * g.cout + co
        b = co * ds[1] + (0 if strided else kh * ds[2] + kw * ds[3])
        return np.stack([a, b, kh, kw], -1).reshape(-1, 4).astype(np.int32)

    tab = rt.table(("dconv", g.kh, g.kw, g.cin, g.cout, ds[1:], strided), table)
    # dx position (ih, iw) reads dy at ((ih - pad') + kh') / stride with pad' = k - 1 - pad.
    pad = (g.kh - 1 - g.ph, g.kw - 1 - g.pw)
    return _run_conv, _conv(rt, "conv_dx", dx, dy, f, tab, g.cin, g.n * g.h * g.w, g.kh * g.kw * g.cout, (g.h, g.w),
                            (g.oh, g.ow), ds, xs, (1, 1), pad, g.cout, (g.sh, g.sw), True, ds[1] == 1, strided,
                            epilogue, features)


@register_workspace("Conv2DBackpropInput", "opencl")
def _dx_scratch(ins, attrs, compute_units):
    """The input gradient's split layers."""
    sizes, f = ins[:2]
    g = _Geom([int(d) for d in sizes.value], f.shape, attrs)
    return _split_scratch(g.cin, g.n * g.h * g.w, g.kh * g.kw * g.cout, f.dtype, compute_units)


@register("Conv2DBackpropFilter", F)
def _conv2d_backprop_filter(ctx, ins, outs, attrs):
    _backprop_filter(ctx, ins, outs[0], attrs)


@register("_FusedConv2DBackpropFilterBiasAddGrad", F)
def _fused_dw_bias(ctx, ins, outs, attrs):
    """The filter gradient and BiasAddGrad(dy) in one launch: the GEMM's row of ones (conv.cl BIAS_ROW)."""
    _backprop_filter(ctx, ins, outs[0], attrs, outs[1])


def _backprop_filter(ctx, ins, dw, attrs, db=None) -> None:
    rt, (x, _, dy) = ctx.runtime, ins
    key = ("Conv2DBackpropFilter", x.shape, dw.shape, dy.shape, dw.dtype, _attrs_key(attrs), db is not None,
           variants(rt))
    plan = rt.plans.get(key)
    if plan is None:
        g = _Geom(x.shape, dw.shape, attrs)
        tile = "dwtile" in key[-1] and db is None and _is3x3(g) and _dwtile(rt, x, dy, dw, g, _divisor(attrs))
        halo = not tile and "dwhalo" in key[-1] and db is None and _is3x3(g) and \
            _dwhalo(rt, x, dy, dw, g, _divisor(attrs))
        if tile:
            plan = rt.plans[key] = (_run_dwtile, tile)
        elif halo:
            plan = rt.plans[key] = (_run_dwhalo, halo)
        else:
            plan = rt.plans[key] = (_run_wgrad, _wgrad_plan(rt, x, dy, dw, attrs, key[-1], db))
    run, launch = plan
    run(rt, launch, x, dy, dw, ctx.workspace, db)


@register_workspace("Conv2DBackpropFilter", "opencl")
def _wgrad_scratch(ins, attrs, compute_units, bias: bool = False):
    """The partial filter gradients of the split p range, then their sum's partials (see _wgrad_plan). With
    `bias`, over one GEMM row more (the bias gradient's), and second the sum of the partials that dw and db are
    copied out of where the kernel cannot finish its sums (_run_wgrad)."""
    x, sizes, _ = ins
    g = _Geom(x.shape, [int(d) for d in sizes.value], attrs)
    m, n, p = _wgrad_mnp(g)
    m += bias
    scratch = split_scratch(_wgrad_splits(m, n, p, compute_units, _divisor(attrs))[0], m * n, x.dtype,
                            compute_units)
    return scratch[:1] + [((m * n,), x.dtype)] + scratch[1:] if bias and scratch else scratch


@register_workspace("_FusedConv2DBackpropFilterBiasAddGrad", "opencl")
def _fused_dw_bias_scratch(ins, attrs, compute_units):
    return _wgrad_scratch(ins, attrs, compute_units, bias=True)


def _wgrad_mnp(g: _Geom) -> tuple[int, int, int]:
    """The filter gradient as a GEMM: m = (kh, kw, ci) rows, n = co columns, summed over p = (n, oh, ow)."""
    return g.kh * g.kw * g.cin, g.cout, g.n * g.oh * g.ow


# A filter gradient's split sums are finished by the last split of each tile (no second pass: a launch less, ~15
# us of the host's time on the H100) when each finishing work-item reads at most this many partials (layers x its
# WM x WN outputs, in rounds of gemm.cl's FINISH_BATCH layers). Mentee's at 32 images do, but the first layer's:
# their tails cost up to 8 us of GPU time over the pass (conv3's 26 layers), and such micro-batches are bound by
# the host's launches. At batch 128 the longest keep the pass, whose work-items share them out (finished, conv2's
# and conv4's took 10 us more).
WGRAD_FINISH_LOADS = 512


def _wgrad_splits(m: int, n: int, p: int, compute_units: int, divisor: int = 1) -> tuple[int, int]:
    """Splits of the p range: about four work-groups per compute unit (per `divisor` compute units under a
    scratch divisor), each at least 16 K slices deep."""
    return _tune.split_k(m, n, p, max(1, compute_units // divisor), 4, 16)


def _wgrad_plan(rt, x, dy, dw, attrs, v=frozenset(), db=None):
    """The filter gradient's launch plan: conv3_wgrad when dw3x3 (in variants `v`) covers it, else conv_wgrad;
    with `db`, one GEMM row more, of ones, whose sums are the bias gradient (BIAS_ROW), split sums finished in the
    kernel however many (a second pass would sum dw and db together, then copy them apart)."""
    g = _Geom(x.shape, dw.shape, attrs)
    xs, ds = g.strides(x.shape), g.strides(dy.shape)
    m, n, p = _wgrad_mnp(g)
    i32 = np.int32
    flags = {"A_K_FAST": 1, "B_K_FAST": 1, "STRIDED": 0}
    candidates, tag, most = None, "", WGRAD_FINISH_LOADS
    bias = {}
    if db is not None:
        m, most, bias = m + 1, 1 << 30, {"BIAS_ROW": 1}
    if "dw3x3" in v and _is3x3(g):
        vt, candidates, tag = _tiles(v)
        if "dwfinish" in v and db is None:  # finished in the kernel however many; other tiles may win: tuned apart
            most, tag = 1 << 30, tag + "f"
        base, tabs, name = "conv3_wgrad", (), "conv3_dw"
        flags = {"A_K_FAST": 1, "B_K_FAST": 1, "CIN": g.cin, **vt}
        geometry = (g.h, g.w, xs[0], xs[1], xs[2], xs[3], *ds)
    else:
        def table():  # m = (kh, kw, ci): input offset of that tap
            kh, kw, ci = np.meshgrid(np.arange(g.kh), np.arange(g.kw), np.arange(g.cin), indexing="ij")
            tab = np.stack([0 * ci, ci * xs[1] + kh * xs[2] + kw * xs[3], kh, kw], -1)
            return tab.reshape(-1, 4).astype(np.int32)

        base, tabs, name = "conv_wgrad", (rt.table(("wconv", g.kh, g.kw, g.cin, xs[1:]), table),), "conv_dw"
        geometry = (g.oh, g.ow, g.h, g.w, xs[0], xs[2], xs[3], *ds, g.sh, g.sw, g.ph, g.pw)

    def make(cfg):
        splits, chunk = _wgrad_splits(m, n, p, rt.info["compute_units"], _divisor(attrs))
        g_, loc = _tune.launch_shape(cfg, m, n, splits)
        scalars = tuple(i32(v) for v in (m, n, p, chunk, *geometry))
        kern = kernel(rt, SRC, base, dw.dtype, **flags, **bias, **_tune.defines(cfg))
        finish = finishes(rt, splits, cfg, most)
        return kern, g_, loc, tabs, scalars, splits, finish

    # A scratch divisor leaves fewer work-groups (splits), where smaller tiles may win: tuned apart.
    d = _divisor(attrs)
    cfg = _tune.choose(rt, f"{name}{tag}|{dw.dtype.name}|{m}x{n}x{p}" + (f"/{d}" if d > 1 else ""),
                       dw.dtype.itemsize, lambda cfg: _run_wgrad(rt, make(cfg), x, dy, dw, rt.allocate, db),
                       candidates, nearest=base == "conv3_wgrad")
    return make(cfg)


# conv3_wgrad_halo's configs are (TCI, TCO, SR, WI, WO): TCI input x TCO output channels a work-group, SR image rows
# a stage, WI x WO channels (all 9 taps of each) a work-item.
# NOTE: a work-group with more work-items than a stage has inputs to stage (TCI (SR + 2) x the padded width) gave
# wrong sums on PoCL (found late in stop 45, not understood): such configs do not fit, nor does one of a single row
# a stage (SR 1: the first H200 run tuned one for conv2; refused from a tuning file too).
DWHALO_CPU_TILE = (8, 16, 2, 1, 4)


def _dwhalo_fits(cfg, iw: int, max_wg: int, local_mem: int, itemsize: int) -> bool:
    """Whether conv3_wgrad_halo runs with `cfg` on `iw`-wide rows within the device's limits."""
    tci, tco, sr, wi, wo = cfg
    iwp = -(-iw // 4) * 4
    xrow = iwp + 8 if (iwp + 8) % 8 else iwp + 12  # conv.cl's DXROW, DXPLANE, DDPLANE
    xplane = (sr + 2) * xrow + (0 if (sr + 2) * xrow % 8 else 4)
    local = (tci * xplane + tco * (sr * iwp + 4)) * itemsize + 3 * (sr + 2) * 4
    items = tci // wi * (tco // wo)
    return (sr >= 2 and tci % wi == 0 and tco % wo == 0 and items <= min(max_wg, tci * (sr + 2) * iwp) and
            local <= local_mem)


def _dwhalo_candidates(cin: int, cout: int) -> list[tuple]:
    """GPU configs for a filter gradient of cin x cout channels: 64-256 work-items, at most 72 accumulators (9 WI WO)
    a work-item, no wider than the channels need."""
    out = []
    for tci, tco, sr, (wi, wo) in itertools.product((8, 16, 32), (32, 64, 128), (2, 4), ((1, 4), (1, 8), (2, 4))):
        if 64 <= tci // wi * (tco // wo) <= 256 and tci < cin + 8 and tco < cout + 32:
            out.append((tci, tco, sr, wi, wo))
    return out


def _dwhalo(rt, x, dy, dw, g: _Geom, divisor: int):
    """The launch plan of conv.cl's conv3_wgrad_halo (a 3x3 stride-1 SAME filter gradient), tuned; None where no
    config fits or the input has fewer than 8 channels. Splits as conv3_wgrad's (_wgrad_splits: the planner's
    scratch). An untuned GPU takes the most accumulators a work-item, about 1024 channel pairs a work-group, 2 rows
    a stage."""
    xs, ds = g.strides(x.shape), g.strides(dy.shape)
    m, n, p = _wgrad_mnp(g)
    dt = dw.dtype

    def fits(cfg):
        return _dwhalo_fits(cfg, g.w, rt.dev.max_wg, rt.info["local_mem_bytes"], dt.itemsize)

    candidates = _dwhalo_candidates(g.cin, g.cout)
    if g.cin < 8 or not (any(fits(c) for c in candidates) if rt.dev.is_gpu else fits(DWHALO_CPU_TILE)):
        return None  # fewer than 8 input channels (an RGB layer's 3) would idle most of every work-group
    splits, chunk = _wgrad_splits(m, n, p, rt.info["compute_units"], divisor)
    scalars = tuple(np.int32(v) for v in (n, g.n * g.h, g.h, chunk, *xs, *ds))

    def make(cfg):
        tci, tco, sr, wi, wo = cfg
        kern = kernel(rt, SRC, "conv3_wgrad_halo", dt, CIN=g.cin, IW=g.w, TCI=tci, TCO=tco, SR=sr, WI=wi, WO=wo)
        tx, ty = tco // wo, tci // wi
        return kern, (-(-n // tco) * tx, -(-g.cin // tci) * ty, splits), (tx, ty, 1), scalars, splits

    def run(cfg):
        _run_dwhalo(rt, make(cfg), x, dy, dw, rt.allocate)

    ok = [c for c in candidates if fits(c)]
    default = min(ok, key=lambda c: (-c[3] * c[4], abs(c[0] * c[1] - 1024), abs(c[2] - 2)), default=None)
    key = f"conv3_dwh|{dt.name}|{int(xs[3] == 1)}|w{g.w}|{m}x{n}x{p}" + (f"/{divisor}" if divisor > 1 else "")
    return make(_tune.choose(rt, key, dt.itemsize, run, candidates, nearest=True, fits=fits, default=default,
                             cpu=DWHALO_CPU_TILE))


def _run_dwhalo(rt, plan, x, dy, dw, workspace, db=None) -> None:
    kern, g, loc, scalars, splits = plan
    if splits == 1:
        rt.run(kern, g, loc, dw, x, dy, *scalars)
        return
    layers = workspace((splits, dw.size), dw.dtype)
    rt.run(kern, g, loc, layers, x, dy, *scalars)
    reduce(rt, "sum", dw, layers, [0], 1, workspace)


# conv3_wgrad_tile's configs are (TCI, TCO, SR, WI, WO, PG): TCI input x TCO output channels (x 9 taps) a work-group,
# strips of SR image rows a stage, WI x WO channels of one tap a work-item, PG groups of work-items sharing a stage's
# positions. Its split layers are capped at DWTILE_SCRATCH_BYTES whatever the compute units (conv3_wgrad's splits
# fill ~4 work-groups a compute unit: 8.5 MB for Mentee's conv4 and conv5 at 128 images on the H200's 132), and at
# conv3_wgrad's splits, so that they fit the scratch the planner declares (_wgrad_scratch); the work-items the
# device needs come from the PG groups instead, whose sums are added in local memory.
DWTILE_SCRATCH_BYTES = 2 << 20
DWTILE_GROUPS_PER_CU = 2
DWTILE_CPU_TILE = (8, 16, 2, 4, 4, 2)
DWTILE_PREFETCH = 48
# A finishing work-item reads 16 partials at a time (conv.cl DWT_BATCH): 256 are 16 rounds of L2 latency, a few us.
DWTILE_FINISH_LOADS = 256


def _dwtile_fits(cfg, cin: int, ih: int, iw: int, max_wg: int, local_mem: int, itemsize: int) -> bool:
    """Whether conv3_wgrad_tile builds and runs with `cfg` on `ih` x `iw` images of `cin` channels: runs of 4, the
    work-group and its local memory within the device's limits, no more input channels a tile than a run of 4 past
    cin (an RGB layer takes 4)."""
    tci, tco, sr, wi, wo, pg = cfg
    items = tco // wo * 9 * (tci // wi)
    stage = ((sr + 2) * (iw + 2) * (tci + 4) + sr * iw * (tco + 4)) * itemsize
    return (wi % 4 == 0 and wo % 4 == 0 and tci % wi == 0 and tco % wo == 0 and tci < cin + 4 and sr <= ih and
            items * pg <= max_wg and max(stage, items * wi * wo * itemsize) + 16 <= local_mem)  # and last_


def _dwtile_candidates(cin: int, cout: int, ih: int, iw: int) -> list[tuple]:
    """GPU configs: 128-512 work-items, 64-256 positions a stage, at most DWTILE_PREFETCH values a work-item staged a
    stage (the registers holding the next one), no wider than the channels need; 4 x 4 channels a work-item and 16
    output channels a work-group for an RGB layer only (its 27 x 32 outputs make few tiles)."""
    out = []
    for tci, tco, sr, (wi, wo), pg in itertools.product((4, 8, 16, 32), (16, 32, 64), (1, 2, 4, 8, 16),
                                                        ((4, 4), (4, 8), (8, 8)), (1, 2, 4, 8)):
        if (tci % wi or tco >= cout + 32 or tci >= cin + 4 or (tci < 8 <= cin) or
                (wi * wo < 32 <= cin) or (tco < 32 <= cin)):  # an RGB layer's small tiles: few, short sums
            continue
        items = tco // wo * 9 * (tci // wi) * pg
        staged = -(-tci * (sr + 2) * iw // items) + -(-tco * sr * iw // items)
        if 128 <= items <= 512 and 64 <= sr * iw <= 256 and sr <= ih and staged <= DWTILE_PREFETCH:
            out.append((tci, tco, sr, wi, wo, pg))
    return out


def _dwtile_splits(cfg, g: _Geom, itemsize: int, compute_units: int, divisor: int) -> tuple[int, int]:
    """(splits, strips a split) of conv3_wgrad_tile under `cfg`: about DWTILE_GROUPS_PER_CU work-groups a compute
    unit, within DWTILE_SCRATCH_BYTES of layers and conv3_wgrad's splits (the declared scratch), and few enough for
    the kernel to finish them."""
    tci, tco, sr, wi, wo, pg = cfg
    m, n, p = _wgrad_mnp(g)
    strips = g.n * -(-g.h // sr)
    tiles = -(-g.cin // tci) * -(-g.cout // tco)
    most = min(DWTILE_SCRATCH_BYTES // divisor // (m * n * itemsize), _wgrad_splits(m, n, p, compute_units, divisor)[0])
    # The last work-group of a tile adds the layers up alone: at most DWTILE_FINISH_LOADS partials a work-item.
    finish = DWTILE_FINISH_LOADS // (wi * wo // pg)
    splits = max(1, min(most, finish, strips, -(-DWTILE_GROUPS_PER_CU * compute_units // tiles)))
    per = -(-strips // splits)
    return -(-strips // per), per


def _dwtile(rt, x, dy, dw, g: _Geom, divisor: int):
    """The launch plan of conv.cl's conv3_wgrad_tile (a 3x3 stride-1 SAME filter gradient), tuned; None where no
    config fits, or where the device's kernels cannot finish their split sums (reduce.finishes_splits: conv3_wgrad
    adds them up by a pass there)."""
    xs, ds = g.strides(x.shape), g.strides(dy.shape)
    m, n, p = _wgrad_mnp(g)
    dt = dw.dtype
    cu = rt.info["compute_units"]
    if not finishes_splits(rt):
        return None
    declared = _wgrad_splits(m, n, p, cu, divisor)[0]  # _wgrad_scratch's layers: the split layers' buffer

    def fits(cfg):
        return _dwtile_fits(cfg, g.cin, g.h, g.w, rt.dev.max_wg, rt.info["local_mem_bytes"], dt.itemsize)

    tci, tco, sr, wi, wo, pg = DWTILE_CPU_TILE
    tci = min(tci, -(-g.cin // 4) * 4)  # an RGB layer's 3 channels: a tile of 4
    cpu = (tci, tco, min(sr, g.h), min(wi, tci), wo, pg)
    candidates = _dwtile_candidates(g.cin, g.cout, g.h, g.w)
    if not (any(fits(c) for c in candidates) if rt.dev.is_gpu else fits(cpu)):
        return None

    def make(cfg):
        tci, tco, sr, wi, wo, pg = cfg
        splits, per = _dwtile_splits(cfg, g, dt.itemsize, cu, divisor)
        kern = kernel(rt, SRC, "conv3_wgrad_tile", dt, CIN=g.cin, IW=g.w, TCI=tci, TCO=tco, SR=sr, WI=wi, WO=wo,
                      PG=pg)
        tx, ty = tco // wo, 9 * (tci // wi)
        grid = (-(-n // tco) * tx, -(-g.cin // tci) * ty, splits * pg)
        scalars = tuple(np.int32(v) for v in (n, g.h, g.n * -(-g.h // sr), per, *xs, *ds))
        return kern, grid, (tx, ty, pg), scalars, splits, declared

    def run(cfg):
        _run_dwtile(rt, make(cfg), x, dy, dw, rt.allocate)

    ok = [c for c in candidates if fits(c)]
    default = min(ok, key=lambda c: (-c[3] * c[4], abs(c[0] // c[3] * 9 * c[1] // c[4] * c[5] - 256),
                                     abs(c[2] * g.w - 64)), default=None)
    key = f"conv3_dwt|{dt.name}|{int(xs[3] == 1)}|w{g.w}|{m}x{n}x{p}" + (f"/{divisor}" if divisor > 1 else "")
    return make(_tune.choose(rt, key, dt.itemsize, run, candidates, nearest=True, fits=fits, default=default,
                             cpu=cpu))


def _run_dwtile(rt, plan, x, dy, dw, workspace, db=None) -> None:
    """The split layers are the first `splits` of the `declared` that the planner gives (its shape must be the
    declaration's), added up by the last work-group of each tile."""
    kern, g, loc, scalars, splits, declared = plan
    if splits == 1:
        rt.run(kern, g, loc, None, x, dy, dw, None, *scalars)
        return
    layers = workspace((declared, dw.size), dw.dtype)
    rt.run(kern, g, loc, layers, x, dy, dw, done_counters(rt, (g[0] // loc[0]) * (g[1] // loc[1])), *scalars)

def _run_wgrad(rt, plan, x, dy, dw, workspace, db=None) -> None:
    """With `db`, the GEMM's last row (of ones) is the bias gradient."""
    kern, g, loc, tabs, scalars, splits, finish = plan  # tabs: (the tap table,), or () for conv3_wgrad
    if splits == 1:
        rt.run(kern, g, loc, dw, x, dy, *tabs, None, db, None, *scalars, np.int32(0))
        return
    size = dw.size + (0 if db is None else db.size)
    layers = workspace((splits, size), dw.dtype)
    if finish:
        rt.run(kern, g, loc, layers, x, dy, *tabs, dw, db, tile_counters(rt, g, loc), *scalars, np.int32(1))
        return
    rt.run(kern, g, loc, layers, x, dy, *tabs, None, None, None, *scalars, np.int32(0))
    if db is None:
        reduce(rt, "sum", dw, layers, [0], 1, workspace)
        return
    total = workspace((size,), dw.dtype)  # a device whose kernels cannot finish their sums (finishes_splits)
    reduce(rt, "sum", total, layers, [0], 1, workspace)
    rt.copy(rt.view(dw, (dw.size,)), total[:dw.size])
    rt.copy(db, total[dw.size:])


# -- DepthwiseConv2dNative and its backprops (conv.cl: one work-item per output element; the filter gradient, a
# long reduction over the batch and positions, one work-group per filter element) ----------------------------
_DL = 64
def _depthwise_args(x_shape, f_shape, y_shape, attrs) -> tuple:
    """(C, M, int8 geo, int2 pad, int4 x strides, int4 y strides) as conv.cl's depthwise kernels take them."""
    g = _Geom(x_shape, f_shape, attrs)
    return (np.int32(g.cin), np.int32(f_shape[3]),
            int8((g.h, g.w, g.oh, g.ow, g.kh, g.kw, g.sh, g.sw)), cltypes.make_int2(g.ph, g.pw),
            cltypes.make_int4(*g.strides(x_shape)), cltypes.make_int4(*g.strides(y_shape)))


@register("DepthwiseConv2dNative", F)
def _depthwise(ctx, ins, outs, attrs):
    rt, (x, f), y = ctx.runtime, ins, outs[0]
    args = _depthwise_args(x.shape, f.shape, y.shape, attrs)
    rt.run1d(kernel(rt, SRC, "depthwise", x.dtype), y.size, y, x, f, np.int32(y.size), *args)


@register("DepthwiseConv2dNativeBackpropInput", F)
def _depthwise_backprop_input(ctx, ins, outs, attrs):
    rt, (_, f, dy), dx = ctx.runtime, ins, outs[0]
    args = _depthwise_args(dx.shape, f.shape, dy.shape, attrs)
    g = _Geom(dx.shape, f.shape, attrs)
    k = kernel(rt, SRC, "depthwise_backprop_input", f.dtype, KH=g.kh, KW=g.kw, SH=g.sh, SW=g.sw)
    rt.run1d(k, dx.size, dx, dy, f, np.int32(dx.size), *args)


# The filter gradient sums all of a channel's taps in one pass when the filter has at most _TAPS_MAX of them (each
# item keeps one accumulator a tap), over chunks of the positions that make about _DW_GROUPS_PER_CU work-groups per
# compute unit, each at least _DW_LEAST positions.
_TAPS_MAX = 25
_DW_GROUPS_PER_CU = 8
_DW_LEAST = 4 * _DL


def _dw_filter_chunks(n: int, oh: int, ow: int, channels: int, compute_units: int) -> tuple[int, int]:
    """(chunks, positions per chunk) of the filter gradient's sums: a function of shapes and compute units only,
    so that the memory planner knows the partials (_depthwise_filter_scratch)."""
    positions = n * oh * ow
    chunks = max(1, min(-(-_DW_GROUPS_PER_CU * compute_units // max(channels, 1)), positions // _DW_LEAST))
    chunk = max(1, -(-positions // chunks))
    return max(1, -(-positions // chunk)), chunk


@register("DepthwiseConv2dNativeBackpropFilter", F)
def _depthwise_backprop_filter(ctx, ins, outs, attrs):
    rt, (x, _, dy), df = ctx.runtime, ins, outs[0]
    args = _depthwise_args(x.shape, df.shape, dy.shape, attrs)
    kh, kw, c, m = df.shape
    g = _Geom(x.shape, df.shape, attrs)
    if kh * kw > _TAPS_MAX or df.size == 0:
        k = kernel(rt, SRC, "depthwise_backprop_filter", x.dtype, DL=_DL)
        rt.run(k, (df.size * _DL,), (_DL,), df, x, dy, np.int32(df.size), np.int32(x.shape[0]), *args)
        return
    chunks, chunk = _dw_filter_chunks(g.n, g.oh, g.ow, c * m, rt.info["compute_units"])
    k = kernel(rt, SRC, "depthwise_backprop_filter_taps", x.dtype, DL=_DL, KH=kh, KW=kw)
    part = df if chunks == 1 else ctx.workspace((chunks, df.size), df.dtype)
    finish = 1 < chunks <= FINISH_CHUNKS and finishes_splits(rt)  # the last group of a channel adds them up
    rt.run(k, (chunks * _DL, c * m), (_DL, 1), part, x, dy, df, done_counters(rt, c * m) if finish else None,
           np.int32(g.n * g.oh * g.ow), np.int32(chunk), *args, np.int32(finish))
    if chunks > 1 and not finish:
        reduce(rt, "sum", df, part, [0], 1, ctx.workspace)


@register_workspace("DepthwiseConv2dNativeBackpropFilter", "opencl")
def _depthwise_filter_scratch(ins, attrs, compute_units):
    """The per-chunk partial filter gradients, then what adding them up writes."""
    x, sizes = ins[0], [int(d) for d in ins[1].value]
    g = _Geom(x.shape, sizes, attrs)
    size = math.prod(sizes)
    if sizes[0] * sizes[1] > _TAPS_MAX or size == 0:
        return []
    chunks = _dw_filter_chunks(g.n, g.oh, g.ow, sizes[2] * sizes[3], compute_units)[0]
    if chunks == 1:
        return []
    return [((chunks, size), x.dtype)] + [(s, x.dtype) for s in partials((chunks, size), [0], compute_units)]
