"""NumPy kernels for Conv2D, Conv2DBackpropInput and Conv2DBackpropFilter.

Three paths, chosen from shapes and attrs alone (so the declared workspaces match what a kernel asks for):
- generic: im2col + one GEMM per chunk of images; any window, stride, padding and data format;
- shift: NCHW, 3x3, stride 1, SAME (what Mentee-style CNNs run): im2col by contiguous copies of a padded,
  flattened image, and fewer of them (3 instead of 9);
- winograd: the same convolutions when they have 32 or more channels in and out (_path): F(4x4, 3x3) does 1/4 of
  the multiplies (F(2x2, 3x3), on images where F(4x4)'s tiles waste more, 4/9), which there pays for its transforms.
The input gradient of a SAME 3x3 stride-1 conv is itself such a conv (of dy with the flipped filter), so it
takes the same paths. Big temporaries come from ctx.workspace in the order the workspace functions list them,
and are bounded per call (the batch is processed in chunks), whatever the batch size.

The kernels split the batch into at most one shard of images per intra-op thread (tfplus.threads), each of
~0.5 ms of work at least: each shard runs the path above on its images with its own scratch and BLAS on one
thread. Filter gradients sum the shards' partial
gradients in shard order, so they are deterministic for a fixed thread count. NOTE: a shard keeps the whole
chunk budget, so scratch grows with the thread count (up to the batch's im2col): dividing it would multiply
the chunks, and each chunk's NumPy calls hold the GIL for a while (~100 us), which the threads share.
"""
from __future__ import annotations

import contextlib
import math
import threading
from typing import NamedTuple

import numpy as np

from tfplus import threads
from tfplus.dtypes import FLOATS, as_dtype
from tfplus.registry import SCRATCH_ATTR, ChunkSpec, register_kernel, register_workspace
from tfplus.tensor_shape import conv_output

# im2col columns per chunk: big enough for an efficient GEMM, small enough that a chunk's columns and GEMM result
# stay in cache between the passes over them. A Mentee training step at batch 32 on one thread (AMD EPYC, 2 cores)
# took 100-101 ms of CPU with 4 MB here and 1 MB for Winograd, 97-99 ms with 2 MB, 108 ms with 8 MB and 4 MB.
# NOTE: not 2 MB: the smaller scratch changes the memory planner's choices (Mentee fine-tuned under 16 MB then
# micro-batches instead of streaming its frozen features). With many threads a task holds a few images anyway.
# NOTE: Winograd's budget (_WINO_CHUNK_BYTES) is 2 MB, not the 1 MB that measured ~3% faster still: the scratch of
# full training's peak (conv5's filter gradient) shrinks with it, fine-tuning's peak is activations (conv1's and
# conv2's outputs, 33.6 of 42.2 MB at batch 128), and at 1 MB full training (79.7 MB) is no longer twice it
# (issue 15's bar, tests/cli/test_finetune.py).
_CHUNK_BYTES = 4 << 20
# A memory plan may ask for smaller chunks (tfplus.planner's 'scratch' transformation): this attr, when the
# executor passes it, divides both chunk budgets (_CHUNK_BYTES, _WINO_CHUNK_BYTES) so that every scratch buffer
# shrinks with it. Kernels and workspace declarations read it the same way, so they stay in step.
SCRATCH_DIVISOR_ATTR = SCRATCH_ATTR


_local = threading.local()


def _divisor(attrs) -> int:
    return int(attrs.get(SCRATCH_DIVISOR_ATTR, 1)) * getattr(_local, "chunks", 1)


@contextlib.contextmanager
def smaller_chunks(factor: int):
    """Convolutions called in this thread inside divide both chunk budgets by `factor` as well. For a process
    that is one of several sharing the caches (tfplus.engine.workers): on the 16-core Xeon 8 worker processes (16
    images each) took 88-103 ms a Mentee step with half the budgets against 111-121 ms with the whole (three
    machines, in turns); one process on its own gained nothing consistent (1 thread: -10% / +2%; 4 threads
    -1.5%), and the 64MB memory plan, which divides them further, measured a few % slower. NOTE: not under a
    memory plan, whose workspaces are declared for the plan's own divisor."""
    previous = getattr(_local, "chunks", 1)
    _local.chunks = previous * factor
    try:
        yield
    finally:
        _local.chunks = previous


def is_fast(x_shape, f_shape, attrs) -> bool:
    """Whether a conv of these shapes takes a fast path (shift or winograd) rather than the generic one."""
    return (attrs["data_format"] == "NCHW" and tuple(f_shape[:2]) == (3, 3) and attrs["padding"] == "SAME"
            and tuple(attrs["strides"]) == (1, 1, 1, 1))


# The Winograd paths and their output tiles' side: F(2x2, 3x3) and F(4x4, 3x3).
_TILE = {"winograd": 2, "winograd4": 4}


def _path(c_in: int, c_out: int, h: int, w: int) -> str:
    """The fast path for a conv of c_in into c_out channels on H x W images, its input gradient (a conv of c_out
    into c_in) and its filter gradient. Winograd's transforms cost NumPy passes over the data that its saved
    multiplies repay with 32 or more channels in and out: Mentee's conv2-5 at batch 32, one thread, each pass
    faster by F(4x4) than by the shift path (conv3-5 by 40-65%; conv2, 32 into 32 at 32x32, by 5-10%, its input
    gradient -3 to +9% from run to run), and 0-25% faster than by F(2x2) (benchmarks/bench_conv.py --paths).
    With fewer channels the shift path is faster (16 into 16 at 32x32 by 13-15%, 3 into 32 by 2-3x). F(4x4)
    where its tiles take fewer multiplies than F(2x2)'s (tiles of 4 waste more on small images: 6x6 ties, 2x2
    is 2.25x F(2x2)'s): its transforms have ~3x F(2x2)'s passes."""
    if min(c_in, c_out) < 32:
        return "shift"
    f4, f2 = 36 * -(-h // 4) * -(-w // 4), 16 * -(-h // 2) * -(-w // 2)
    return "winograd4" if f4 < f2 else "winograd"


def _flipped(f: np.ndarray) -> np.ndarray:
    """The input gradient of a SAME 3x3 stride-1 conv is the SAME conv of dy with this filter: f rotated by
    180 degrees, in and out channels swapped."""
    return f[::-1, ::-1].transpose(0, 1, 3, 2)


def _prefix(buf: np.ndarray, shape) -> np.ndarray:
    """The start of a scratch buffer seen as `shape`: a short last chunk keeps a contiguous layout."""
    return buf.reshape(-1)[:math.prod(shape)].reshape(shape)


# -- generic path: im2col + GEMM -----------------------------------------------------------------------------
class Geometry(NamedTuple):
    """A convolution's sizes in NHWC terms; pads are the top/left padding, Hp/Wp the padded buffer size."""
    n: int
    h: int
    w: int
    c: int
    kh: int
    kw: int
    k: int
    ho: int
    wo: int
    sh: int
    sw: int
    pt: int
    pl: int
    hp: int
    wp: int

    @property
    def padded(self) -> bool:
        return (self.hp, self.wp) != (self.h, self.w)

    @property
    def pointwise(self) -> bool:
        """A 1x1 window at stride 1 and no padding: in NCHW each image is its own columns."""
        return (self.kh, self.kw, self.sh, self.sw) == (1, 1, 1, 1) and not self.padded

    @property
    def span(self) -> int:
        """Positions of a stride-1 conv's output in the flat padded image, rows of Wp (_on_rows): the last output
        position is (Ho - 1) * Wp + Wo - 1, and the windows of all of them lie inside the image."""
        return (self.ho - 1) * self.wp + self.wo

    def chunk(self, itemsize: int, div: int = 1, floats: int | None = None) -> int:
        """Images per im2col chunk, of `floats` scratch elements an image (the columns at Ho * Wo unless given)."""
        per_image = (floats or self.ho * self.wo * self.kh * self.kw * self.c) * itemsize
        return max(1, min(self.n, _CHUNK_BYTES // div // max(per_image, 1)))


def _nhwc_shape(shape, fmt: str) -> tuple:
    return tuple(shape) if fmt == "NHWC" else (shape[0], shape[2], shape[3], shape[1])


def geometry(x_shape, f_shape, y_shape, attrs) -> Geometry:
    """Sizes of one convolution from its input, filter and output shapes (in the op's data format)."""
    fmt = attrs["data_format"]
    n, h, w, c = _nhwc_shape(x_shape, fmt)
    _, ho, wo, k = _nhwc_shape(y_shape, fmt)
    kh, kw = int(f_shape[0]), int(f_shape[1])
    _, sh, sw, _ = _nhwc_shape(attrs["strides"], fmt)
    pt, pl = conv_output(h, kh, sh, attrs["padding"])[1], conv_output(w, kw, sw, attrs["padding"])[1]
    hp = max((ho - 1) * sh + kh, h + pt)
    wp = max((wo - 1) * sw + kw, w + pl)
    return Geometry(n, h, w, c, kh, kw, k, ho, wo, sh, sw, pt, pl, hp, wp)


def _nhwc(a: np.ndarray, fmt: str) -> np.ndarray:
    return a if fmt == "NHWC" else a.transpose(0, 2, 3, 1)


def _columns(g: Geometry, kind: str, fmt: str) -> bool:
    """Whether the generic path builds columns: not for an NCHW pointwise conv's forward and input gradient,
    GEMMs on the images themselves (a filter gradient's one GEMM over the chunk wants them side by side)."""
    return not (fmt == "NCHW" and g.pointwise and kind != "filter")


def _on_rows(g: Geometry, kind: str, fmt: str) -> bool:
    """Whether an NCHW conv at stride 1 works on whole rows of the padded input (Wp positions a row, not Wo), where
    a filter tap (a, b) is the offset a * Wp + b in the flat image. The forward copies its columns as a run of
    Geometry.span floats per image, channel and tap instead of Ho runs of Wo, for a GEMM Wp / Wo wider (LeNet's
    forward convs at batch 128, one thread: 8-13% faster); both gradients use the kw shifts of dy on those rows
    (_dy_shifts) instead of every tap's columns. Not a pointwise conv: its forward and input gradient are GEMMs on
    the images themselves, and its filter gradient's one shift would only copy dy once more."""
    return fmt == "NCHW" and (g.sh, g.sw) == (1, 1) and not g.pointwise and _columns(g, kind, fmt)


def _rows_floats(g: Geometry, kind: str) -> int:
    """Scratch elements per image on whole rows (_on_rows): the forward's columns and staged output; a
    gradient's kh*C rows (x's, or dx's partial sums), dy's kw shifts and dy staged."""
    if kind == "forward":
        return g.kh * g.kw * g.c * g.span + g.k * g.ho * g.wp
    return (g.kh * g.c + g.kw * g.k) * g.ho * g.wp + g.k * (g.ho * g.wp + g.kw - 1)


def _generic_workspaces(g: Geometry, dtype, kind: str, fmt: str, div: int = 1) -> list[tuple]:
    """Scratch of the generic path, in request order: padded input, columns (_columns; over whole rows when
    _on_rows), then y staged on rows of Wp (_on_rows) or dy in the columns' layout (NCHW's filter gradient), and
    for a filter gradient a chunk's partial one; a gradient on rows asks for _dy_shifts' buffers instead."""
    rows = _on_rows(g, kind, fmt)
    nb = g.chunk(dtype.size, div, _rows_floats(g, kind) if rows else None)
    ws = []
    if g.padded:
        ws.append(((nb, g.hp, g.wp, g.c) if fmt == "NHWC" else (nb, g.c, g.hp, g.wp), dtype))
    if rows and kind != "forward":  # _dy_shifts: kh*C rows, dy staged, its shifts; the filter as a matrix
        q, small = g.ho * g.wp, ((g.kh * g.c, g.kw * g.k), dtype)
        return ws + [((g.kh * g.c, nb * q), dtype), ((g.k, nb, g.kw - 1 + q), dtype), ((g.kw * g.k, nb * q), dtype),
                     small] + ([small] if kind == "filter" else [])
    if rows:
        ws += [((nb, g.kh * g.kw * g.c, g.span), dtype), ((nb, g.k, g.ho * g.wp), dtype)]
    elif _columns(g, kind, fmt):
        ws.append(((nb, g.ho, g.wo, g.kh, g.kw, g.c), dtype))
    if kind == "filter":
        if fmt == "NCHW":
            ws.append(((g.k, nb * g.ho * g.wo), dtype))
        ws.append(((g.kh * g.kw * g.c, g.k), dtype))
    return ws


def _taps(a: np.ndarray, g: Geometry):
    """(dy, dx, view): view[n, i, j, c] = a[n, i*sh + dy, j*sw + dx, c] for each filter tap."""
    for dy in range(g.kh):
        for dx in range(g.kw):
            yield dy, dx, a[:, dy:dy + (g.ho - 1) * g.sh + 1:g.sh, dx:dx + (g.wo - 1) * g.sw + 1:g.sw]


class _Generic:
    """The generic path's scratch for one kernel call, requested in _generic_workspaces order."""

    def __init__(self, ctx, g: Geometry, dtype, kind: str, fmt: str, div: int = 1):
        bufs = iter([ctx.workspace(shape, dt) for shape, dt in _generic_workspaces(g, dtype, kind, fmt, div)])
        self.g, self.fmt, self.rows = g, fmt, _on_rows(g, kind, fmt)
        self.nb = g.chunk(dtype.size, div, _rows_floats(g, kind) if self.rows else None)
        self.xp = next(bufs) if g.padded else None
        self.cols = next(bufs) if _columns(g, kind, fmt) else None
        self.stage = next(bufs) if (kind == "filter" and fmt == "NCHW") or self.rows else None
        self.shifts = next(bufs) if kind != "forward" and self.rows else None  # _dy_shifts
        self.acc = next(bufs) if kind == "filter" or (kind == "input" and self.rows) else None
        self.part = next(bufs) if kind == "filter" and self.rows else None
        if self.xp is not None:
            self.xp.fill(0)  # the border stays zero; chunks overwrite only the interior

    def chunks(self):
        for n0 in range(0, self.g.n, self.nb):
            yield n0, min(self.nb, self.g.n - n0)

    def padded(self, x: np.ndarray, m: int) -> np.ndarray:
        """The m images x (in the op's data format) inside their zero border, where there is one."""
        if self.xp is None:
            return x
        g = self.g
        _nhwc(self.xp[:m], self.fmt)[:, g.pt:g.pt + g.h, g.pl:g.pl + g.w] = _nhwc(x, self.fmt)
        return self.xp[:m]

    def im2col(self, x: np.ndarray, m: int) -> np.ndarray:
        """NHWC's columns (m*Ho*Wo, kh*kw*C) of the m images in x (NHWC)."""
        g = self.g
        src = self.padded(x, m)
        cols = self.cols[:m]
        for dy, dx, view in _taps(src, g):
            cols[:, :, :, dy, dx] = view
        return cols.reshape(m * g.ho * g.wo, g.kh * g.kw * g.c)

    def rows_of(self, x: np.ndarray, m: int) -> np.ndarray:
        """The m images x (NCHW) padded, as flat images whose rows of Wp follow each other."""
        src = self.padded(x, m)
        if src.strides[2] != self.g.wp * src.strides[3]:
            src = np.ascontiguousarray(src)  # whole rows read across a row's end: rows must follow each other
        return src

    def windows(self, x: np.ndarray, m: int, images_first: bool) -> np.ndarray:
        """The NCHW columns of the m images x (NCHW), by one copy of a strided view: rows are the filter taps
        (dy, dx, c) as f.reshape(-1, K) orders them, so the filter is a GEMM operand as it lies, and each run
        copied is an output row (or on whole rows, _on_rows, the span of them), not one pixel's channels as in
        NHWC's columns (3 floats for an RGB input).
        images_first: (m, taps, positions), each image's columns a matrix; else (taps, m*positions), one matrix."""
        g = self.g
        src = self.rows_of(x, m) if self.rows else self.padded(x, m)
        sn, sc, sy, sx = src.strides
        taps, tap_strides = (g.kh, g.kw, g.c), (sy, sx, sc)
        out, out_strides = ((g.span,), (sx,)) if self.rows else ((g.ho, g.wo), (sy * g.sh, sx * g.sw))
        shape, strides = ((m, *taps, *out), (sn, *tap_strides, *out_strides)) if images_first else \
            ((*taps, m, *out), (*tap_strides, sn, *out_strides))
        view = np.lib.stride_tricks.as_strided(src, shape, strides, writeable=False)
        rows, cols = g.kh * g.kw * g.c, math.prod(out)
        dst = _prefix(self.cols, (m, rows, cols) if images_first else (rows, m * cols))
        np.copyto(dst.reshape(shape), view)
        return dst

    def col2im(self, cols: np.ndarray, dx_out: np.ndarray, m: int) -> None:
        """dx_out (an NHWC view of m images) = the sum of the columns' taps at their input positions; cols are
        (m, Ho, Wo, kh, kw, C)."""
        g = self.g
        dst = _nhwc(self.xp[:m], self.fmt) if self.xp is not None else dx_out
        dst[...] = 0
        for dy, dx, view in _taps(dst, g):
            view += cols[:, :, :, dy, dx]
        if self.xp is not None:
            dx_out[...] = dst[:, g.pt:g.pt + g.h, g.pl:g.pl + g.w]


def _conv2d_generic(ctx, x, f, y, attrs):
    fmt = attrs["data_format"]
    g = geometry(x.shape, f.shape, y.shape, attrs)
    s = _Generic(ctx, g, as_dtype(x.dtype), "forward", fmt, _divisor(attrs))
    fm = f.reshape(-1, g.k)
    for n0, m in s.chunks():
        if s.rows:  # y[n] on rows of Wp (K, span) = f^T @ the image's columns, then its Wo columns a row
            grid = _prefix(s.stage, (m, g.k, g.ho, g.wp))
            np.matmul(fm.T, s.windows(x[n0:n0 + m], m, True), out=grid.reshape(m, g.k, -1)[..., :g.span])
            y[n0:n0 + m] = grid[..., :g.wo]
        elif fmt == "NCHW":  # y[n] (K, Ho*Wo) = f^T @ the image's columns
            cols = x[n0:n0 + m].reshape(m, g.c, -1) if s.cols is None else s.windows(x[n0:n0 + m], m, True)
            np.matmul(fm.T, cols, out=y[n0:n0 + m].reshape(m, g.k, -1))
        else:
            np.matmul(s.im2col(x[n0:n0 + m], m), fm, out=y[n0:n0 + m].reshape(-1, g.k))


def _conv2d_backprop_input_generic(ctx, f, dy, dx, attrs):
    fmt = attrs["data_format"]
    g = geometry(dx.shape, f.shape, dy.shape, attrs)
    s = _Generic(ctx, g, as_dtype(dy.dtype), "input", fmt, _divisor(attrs))
    fm = f.reshape(-1, g.k)
    for n0, m in s.chunks():
        if s.cols is None:  # dx[n] (C, H*W) = f @ dy[n]
            np.matmul(fm, dy[n0:n0 + m].reshape(m, g.k, -1), out=dx[n0:n0 + m].reshape(m, g.c, -1))
            continue
        if s.rows:
            _rows_backprop_input(s, f, dy[n0:n0 + m], dx[n0:n0 + m], m, n0 == 0)
            continue
        if fmt == "NCHW":  # each image's columns (taps, Ho*Wo) = f @ dy[n]
            cols = _prefix(s.cols, (m, fm.shape[0], g.ho * g.wo))
            np.matmul(fm, dy[n0:n0 + m].reshape(m, g.k, -1), out=cols)
            cols = cols.reshape(m, g.kh, g.kw, g.c, g.ho, g.wo).transpose(0, 4, 5, 1, 2, 3)
        else:
            cols = s.cols[:m]
            np.matmul(dy[n0:n0 + m].reshape(-1, g.k), fm.T, out=cols.reshape(m * g.ho * g.wo, -1))
        s.col2im(cols, _nhwc(dx[n0:n0 + m], fmt), m)


def _dy_shifts(s: _Generic, dy: np.ndarray, m: int, first: bool) -> np.ndarray:
    """The kw shifts of the m images dy (NCHW) on rows of Wp, (kw*K, m*Ho*Wp): row (b, k) at position q of
    image n is dyr[n, k, q - b], dyr being dy[n, k] on rows of Wp, zero past Wo and before the image (its
    staging buffer keeps kw - 1 zeros in front of each image). With them a tap (a, b) of either gradient is
    row offset a*Wp of one GEMM's operand or result: kh*C + kw*K rows copied instead of kh*kw*C columns, and
    (LeNet's conv1 filter gradient) a 15 x 30 GEMM result instead of 75 x 6. NOTE: a position past Wo multiplies
    its zero by a pixel (or filter value) that this tap does not reach, so an inf or NaN there can turn a finite
    result NaN (the forward of such an input is not finite anyway)."""
    g = s.g
    q, lead = g.ho * g.wp, g.kw - 1
    grid = _prefix(s.stage, (g.k, s.nb, lead + q))
    rows = grid[:, :, lead:].reshape(g.k, s.nb, g.ho, g.wp)
    if first:  # zeros stay: chunks overwrite only the outputs' positions
        grid[:, :, :lead] = 0
        rows[..., g.wo:] = 0
    rows[:, :m, :, :g.wo] = dy.transpose(1, 0, 2, 3)
    at = grid[:, :m, lead:]  # shift b reads b floats back, into the zeros in front of an image's first row
    ks, ms, ps = at.strides
    out = _prefix(s.shifts, (g.kw * g.k, m * q))
    np.copyto(out.reshape(g.kw, g.k, m, q),
              np.lib.stride_tricks.as_strided(at, (g.kw, g.k, m, q), (-ps, ks, ms, ps), writeable=False))
    return out


def _rows_backprop_filter(s: _Generic, x: np.ndarray, dy: np.ndarray, df: np.ndarray) -> None:
    """df of an NCHW stride-1 conv on whole rows (_on_rows): df[a, b, c, k] = sum over positions q of x's flat
    padded image xp[c, q + a*Wp] times dy's shift b there (_dy_shifts), one GEMM a chunk of the kh*C runs of x
    against the kw*K shifts."""
    g = s.g
    q = g.ho * g.wp
    for n0, m in s.chunks():
        src = s.rows_of(x[n0:n0 + m], m)
        sn, sc, sy, sx = src.strides
        xr = _prefix(s.cols, (g.kh * g.c, m * q))
        np.copyto(xr.reshape(g.kh, g.c, m, q), np.lib.stride_tricks.as_strided(src, (g.kh, g.c, m, q),
                                                                                (sy, sc, sn, sx), writeable=False))
        np.matmul(xr, _dy_shifts(s, dy[n0:n0 + m], m, n0 == 0).T, out=s.acc if n0 == 0 else s.part)
        if n0:
            s.acc += s.part
    df[...] = s.acc.reshape(g.kh, g.c, g.kw, g.k).transpose(0, 2, 1, 3)


def _rows_backprop_input(s: _Generic, f: np.ndarray, dy: np.ndarray, dx: np.ndarray, m: int, first: bool) -> None:
    """dx of the m images dy (NCHW) of a stride-1 conv on whole rows (_on_rows): z = (f as (a, c) x (b, k))
    @ dy's shifts (_dy_shifts) holds, for each row tap a, what lands on the flat padded dx at offset a*Wp: kh
    runs added per image and channel (kh*kw before, one per tap, from a GEMM with K's inner dimension)."""
    g = s.g
    q = g.ho * g.wp
    if first:
        s.acc.reshape(g.kh, g.c, g.kw, g.k)[...] = f.transpose(0, 2, 1, 3)
    z = _prefix(s.cols, (g.kh, g.c, m, q))
    np.matmul(s.acc, _dy_shifts(s, dy, m, first), out=z.reshape(g.kh * g.c, m * q))
    dst = (s.xp[:m] if s.xp is not None else dx).reshape(m, g.c, g.hp * g.wp)
    dst[:, :, :q] = z[0].transpose(1, 0, 2)
    dst[:, :, q:] = 0
    for a in range(1, g.kh):
        dst[:, :, a * g.wp:a * g.wp + q] += z[a].transpose(1, 0, 2)
    if s.xp is not None:
        dx[...] = s.xp[:m, :, g.pt:g.pt + g.h, g.pl:g.pl + g.w]


def _conv2d_backprop_filter_generic(ctx, x, dy, df, attrs):
    fmt = attrs["data_format"]
    g = geometry(x.shape, df.shape, dy.shape, attrs)
    s = _Generic(ctx, g, as_dtype(x.dtype), "filter", fmt, _divisor(attrs))
    if s.rows:
        _rows_backprop_filter(s, x, dy, df)
        return
    out = df.reshape(-1, g.k)
    for n0, m in s.chunks():
        if fmt == "NCHW":  # one GEMM over the chunk: the columns (taps, m*Ho*Wo) @ dy as (m*Ho*Wo, K)
            cols = s.windows(x[n0:n0 + m], m, False)
            rows = _prefix(s.stage, (g.k, m * g.ho * g.wo))
            rows.reshape(g.k, m, -1)[...] = dy[n0:n0 + m].reshape(m, g.k, -1).transpose(1, 0, 2)
            rows = rows.T
        else:
            cols, rows = s.im2col(x[n0:n0 + m], m).T, dy[n0:n0 + m].reshape(-1, g.k)
        if n0 == 0:
            np.matmul(cols, rows, out=out)
        else:
            np.matmul(cols, rows, out=s.acc)
            out += s.acc


# -- shift path ---------------------------------------------------------------------------------------------
# Each image is zero-padded and flattened with rows of Wp = W + 2 columns, so moving by dy*Wp + dx in the flat
# array is the filter tap (dy, dx), and im2col is a few contiguous copies. im2col keeps only the 3 column
# shifts; one GEMM with the filter stacked by row tap gives 3 partial outputs, and the row shifts become
# offsets when they are summed into y (3 copies instead of 9). With few channels (an RGB input) all 9 taps go
# into the columns instead, so that the GEMM's inner dimension stays useful. The images of a chunk lie side
# by side in the columns (one segment each), so each GEMM is one big one whatever the image size.
class Shift(NamedTuple):
    """The padded flat layout of (H, W) images (rows of wp, lq positions each) and how a conv uses it: `taps`
    filter taps in the im2col columns (3 or 9), `groups` row taps applied as offsets (3 or 1), `seg` positions
    per image in the columns and GEMM results (the output rows plus the rows the offsets reach)."""
    h: int
    w: int
    wp: int
    lq: int
    taps: int
    groups: int
    seg: int

    @staticmethod
    def of(h: int, w: int, c: int) -> Shift:
        taps = 9 if 3 * c < 32 else 3
        groups = 27 // (3 * taps)
        return Shift(h, w, w + 2, (h + 2) * (w + 2), taps, groups, (h + groups - 1) * (w + 2))

    @property
    def tail(self) -> int:
        """Columns past the last segment that the filter gradient's row offsets read (kept zero)."""
        return (self.groups - 1) * self.wp

    def interior(self, buf: np.ndarray) -> np.ndarray:
        """The (..., H, W) image inside a padded flat buffer (..., >= lq)."""
        grid = buf[..., :self.lq].reshape(buf.shape[:-1] + (self.h + 2, self.wp))
        return grid[..., 1:self.h + 1, 1:self.w + 1]

    def outputs(self, z: np.ndarray) -> np.ndarray:
        """GEMM results (m, groups * K, seg) as (m, groups, K, rows, wp)."""
        return z.reshape(z.shape[0], self.groups, -1, self.seg // self.wp, self.wp)

    def weights(self, f: np.ndarray, out: np.ndarray) -> np.ndarray:
        """f (3, 3, C, K) as the GEMM's left matrix [(group, k), (tap, c)], copied into `out`."""
        c, k = f.shape[2:]
        if self.taps == 9:
            np.copyto(out, f.reshape(9 * c, k).T)
        else:
            np.copyto(out.reshape(3, k, 3, c), f.transpose(0, 3, 1, 2))
        return out

    def chunk(self, n: int, c: int, itemsize: int, div: int = 1) -> int:
        return max(1, min(n, _CHUNK_BYTES // div // (self.taps * c * self.seg * itemsize)))

    def workspaces(self, kind: str, n: int, c: int, k: int, dtype, div: int = 1) -> list[tuple]:
        """Scratch in request order; kind 'forward' (a conv, also used for the input gradient) or 'filter':
        padded images, columns, then the GEMM result (forward) or dy in the columns' layout and the summed and
        this chunk's filter gradient (filter). The filter as the GEMM's left matrix is shared (_shared)."""
        nb = self.chunk(n, c, dtype.size, div)
        ws = [((nb, c, self.lq + 2), dtype), ((self.taps * c, nb * self.seg + self.tail), dtype)]
        if kind == "forward":
            return ws + [((nb, self.groups * k, self.seg), dtype)]
        return ws + [((k, nb * self.seg), dtype), ((self.groups, k, self.taps * c), dtype),
                     ((k, self.taps * c), dtype)]

    def columns(self, x: np.ndarray, xp: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """The im2col columns (taps * C, m * seg + tail) of the m images x, padded into xp on the way."""
        m, c = x.shape[:2]
        self.interior(xp[:m])[...] = x
        a = _prefix(cols, (self.taps * c, m * self.seg + self.tail))
        a[:, m * self.seg:] = 0  # read only against zeros of dy, but 0 * garbage could be NaN
        for t in range(self.taps):
            off = (t // 3) * self.wp + t % 3
            dst = a[t * c:(t + 1) * c, :m * self.seg].reshape(c, m, self.seg)
            dst[...] = xp[:m, :, off:off + self.seg].transpose(1, 0, 2)
        return a


def _shift_conv(ctx, x: np.ndarray, shared: list, y: np.ndarray, div: int = 1) -> None:
    """y (N, K, H, W) = the SAME 3x3 convolution of x (N, C, H, W) with the filter f (3, 3, C, K) that
    shared holds as the GEMM's left matrix (_shared)."""
    n, c, h, w = x.shape
    k = y.shape[1]
    sh = Shift.of(h, w, c)
    xp, cols, zbuf = (ctx.workspace(s, d) for s, d in sh.workspaces("forward", n, c, k, as_dtype(x.dtype), div))
    xp.fill(0)  # the border stays zero: chunks overwrite only the interior
    wmat = shared[0]
    nb = xp.shape[0]
    for n0 in range(0, n, nb):
        m = min(nb, n - n0)
        a = sh.columns(x[n0:n0 + m], xp, cols)
        # One GEMM per image (its columns are a segment): the results come out image-major, as y is, so the
        # sums of the row taps below run over y's own layout (a transposed write took 25% more of the call).
        z = _prefix(zbuf, (m, sh.groups * k, sh.seg))
        np.matmul(wmat, a[:, :m * sh.seg].reshape(-1, m, sh.seg).transpose(1, 0, 2), out=z)
        outs = sh.outputs(z)
        parts = [outs[:, g, :, g:g + h, :w] for g in range(sh.groups)]
        out = y[n0:n0 + m]
        if sh.groups == 1:
            out[...] = parts[0]
        else:
            np.add(parts[0], parts[1], out=out)
            out += parts[2]


def _shift_backprop_filter(ctx, x: np.ndarray, dy: np.ndarray, df: np.ndarray, shared: list, div: int = 1) -> None:
    """df[g + dy, dx] = dy (K, positions) @ the columns shifted by g rows (positions, taps * C), summed over
    the chunks."""
    n, c, h, w = x.shape
    k = dy.shape[1]
    sh = Shift.of(h, w, c)
    xp, cols, rows, acc, part = (ctx.workspace(s, d) for s, d in
                                 sh.workspaces("filter", n, c, k, as_dtype(x.dtype), div))
    xp.fill(0)
    nb, seg = xp.shape[0], sh.seg
    for i, n0 in enumerate(range(0, n, nb)):
        m = min(nb, n - n0)
        a = sh.columns(x[n0:n0 + m], xp, cols)
        b = _prefix(rows, (k, m * seg))
        grid = b.reshape(k, m, seg // sh.wp, sh.wp)
        grid[:, :, h:] = 0  # positions that are no output are zero, so they add nothing
        grid[:, :, :h, w:] = 0
        grid[:, :, :h, :w] = dy[n0:n0 + m].transpose(1, 0, 2, 3)
        for g in range(sh.groups):
            np.matmul(b, a[:, g * sh.wp:g * sh.wp + m * seg].T, out=acc[g] if i == 0 else part)
            if i:
                acc[g] += part
    if sh.groups == 1:  # acc[0][k, (dy, dx, c)]
        df[...] = acc.reshape(k, 3, 3, c).transpose(1, 2, 3, 0)
    else:  # acc[dy][k, (dx, c)]
        df[...] = acc.reshape(3, k, 3, c).transpose(0, 2, 3, 1)


# -- Winograd F(2x2, 3x3) and F(4x4, 3x3) --------------------------------------------------------------------
# Lavin & Gray's minimal filtering: an r x r output tile (r = 2 or 4) is A^T [(G g G^T) * (B^T d B)] A for its
# (r + 2) x (r + 2) input tile d: (r + 2)^2 multiplies per (in, out) channel pair for r^2 outputs, so the GEMMs
# do 4/9 (F(2x2)) or 1/4 (F(4x4)) of direct convolution's work, and the transformed data is 4x or 2.25x the
# image's. Per chunk of images the data is kept "HWNC" (rows, columns, then images x channels): each 1-D
# transform (_BT, _AT, _A) runs once on the rows of every tile, then once on their columns, as adds of long
# contiguous runs, and the (r + 2)^2 GEMMs are big ones, (tiles x images, C) @ (C, K). NCHW <-> HWNC changes are
# copies in pieces that stay in cache (_to_hwnc, _from_hwnc).
# F(2x2): B^T = [[1,0,-1,0], [0,1,1,0], [0,-1,1,0], [0,1,0,-1]], A^T = [[1,1,1,0], [0,1,-1,-1]]; F(4x4): the
# matrices below (Lavin & Gray's, points 0, +-1, +-2): its transforms take ~3x the NumPy passes of F(2x2)'s on
# a smaller tiled copy, and its float32 error is 10-20x larger: 3-8e-6 of the largest result on Mentee's layers
# (tests/ops/test_nn.py::test_winograd4_float32_error).
_G2 = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
_G4 = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])
_WINO_CHUNK_BYTES = 2 << 20  # transformed input ((r + 2)^2 x tiles x images x C) per chunk: see _CHUNK_BYTES


def _bt2(d, o, tmp) -> None:
    """o[i] = sum_j B^T[i, j] d[j] for F(2x2)'s 4 x 4 B^T (lists of views of one shape)."""
    np.subtract(d[0], d[2], out=o[0])
    np.add(d[1], d[2], out=o[1])
    np.subtract(d[2], d[1], out=o[2])
    np.subtract(d[1], d[3], out=o[3])


def _bt4(d, o, tmp) -> None:
    """o[i] = sum_j B^T[i, j] d[j] for F(4x4)'s B^T = [[4,0,-5,0,1,0], [0,-4,-4,1,1,0], [0,4,-4,-1,1,0],
    [0,-2,-1,2,1,0], [0,2,-1,-2,1,0], [0,4,0,-5,0,1]], in 19 passes over shared terms (tmp: scratch of o's shape)."""
    s, t = o[3], tmp
    np.subtract(d[4], d[2], out=s)
    np.subtract(d[0], d[2], out=o[0])
    o[0] *= 4
    o[0] += s                           # 4 d0 - 5 d2 + d4
    np.subtract(d[3], d[1], out=t)
    t *= 2
    np.subtract(d[5], d[3], out=o[5])
    o[5] -= t
    o[5] -= t                           # 4 d1 - 5 d3 + d5
    np.subtract(s, t, out=o[4])         # (d4 - d2) - 2 (d3 - d1)
    s += t                              # (d4 - d2) + 2 (d3 - d1)
    np.add(d[1], d[2], out=t)
    t *= 4
    np.add(d[3], d[4], out=o[1])
    o[1] -= t
    np.subtract(d[1], d[2], out=t)
    t *= 4
    np.subtract(d[4], d[3], out=o[2])
    o[2] += t


def _at2(m, o, tmp) -> None:
    """o[i] = sum_j A^T[i, j] m[j] for F(2x2)'s 2 x 4 A^T."""
    np.add(m[0], m[1], out=o[0])
    o[0] += m[2]
    np.subtract(m[1], m[2], out=o[1])
    o[1] -= m[3]


def _at4(m, o, tmp) -> None:
    """o[i] = sum_j A^T[i, j] m[j] for F(4x4)'s A^T = [[1,1,1,1,1,0], [0,1,-1,2,-2,0], [0,1,1,4,4,0],
    [0,1,-1,8,-8,1]], in 13 passes."""
    t = tmp
    np.add(m[1], m[2], out=o[2])
    np.add(m[3], m[4], out=t)
    np.add(m[0], o[2], out=o[0])
    o[0] += t
    t *= 4
    o[2] += t                           # (m1 + m2) + 4 (m3 + m4)
    np.subtract(m[1], m[2], out=o[1])
    np.subtract(m[3], m[4], out=t)
    np.add(o[1], m[5], out=o[3])
    t *= 2
    o[1] += t                           # (m1 - m2) + 2 (m3 - m4)
    t *= 4
    o[3] += t                           # (m1 - m2) + 8 (m3 - m4) + m5


def _a2(y, o, tmp) -> None:
    """o[j] = sum_i A^T[i, j] y[i] (the output transform's adjoint, for dy) for F(2x2), o[3] negated: a copy
    instead of a negation, undone by _GRAD_T[2]."""
    o[0][...] = y[0]
    np.add(y[0], y[1], out=o[1])
    np.subtract(y[0], y[1], out=o[2])
    o[3][...] = y[1]


def _a4(y, o, tmp) -> None:
    """o[j] = sum_i A^T[i, j] y[i] for F(4x4) (_at4's A^T), in 13 passes."""
    t = tmp
    np.add(y[0], y[2], out=o[1])
    np.add(y[1], y[3], out=t)
    np.subtract(o[1], t, out=o[2])
    o[1] += t                           # y0 + y1 + y2 + y3; o[2]: y0 - y1 + y2 - y3
    np.multiply(y[2], 4, out=o[3])
    o[3] += y[0]
    np.multiply(y[3], 4, out=t)
    t += y[1]
    t *= 2
    np.subtract(o[3], t, out=o[4])
    o[3] += t                           # y0 + 2 y1 + 4 y2 + 8 y3; o[4]: y0 - 2 y1 + 4 y2 - 8 y3
    o[0][...] = y[0]
    o[5][...] = y[3]


_BT, _AT, _A = {2: _bt2, 4: _bt4}, {2: _at2, 4: _at4}, {2: _a2, 4: _a4}
# G f G^T for every (c, k) at once is one GEMM of the flattened filter taps with G (x) G (a Kronecker product,
# (r + 2)^2 x 9): memory-bound, and several times faster than the equivalent einsum, which loops in C without BLAS.
# The filter gradient is G^T (sum over tiles of V^T dM) G, the same product's transpose (F(2x2)'s with _a2's sign).
_FILTER = {2: np.kron(_G2, _G2), 4: np.kron(_G4, _G4)}
_GRAD_T = {2: np.kron(_G2 * [[1], [1], [1], [-1]], _G2 * [[1], [1], [1], [-1]]).T.copy(), 4: _FILTER[4].T.copy()}


class Tiles(NamedTuple):
    """A Winograd problem: N images of C x H x W, K filters, th x tw output tiles of r x r, nb images per chunk."""
    n: int
    c: int
    k: int
    h: int
    w: int
    th: int
    tw: int
    nb: int
    r: int

    @staticmethod
    def of(n: int, c: int, k: int, h: int, w: int, itemsize: int, div: int = 1, r: int = 2) -> Tiles:
        th, tw = -(-h // r), -(-w // r)
        nb = max(1, min(n, _WINO_CHUNK_BYTES // div // ((r + 2) ** 2 * th * tw * max(c, k) * itemsize)))
        chunks = max(1, -(-n // nb))
        return Tiles(n, c, k, h, w, th, tw, max(1, -(-n // chunks)), r)  # equal chunks

    @property
    def a(self) -> int:
        """An input tile's side."""
        return self.r + 2

    @property
    def exact(self) -> bool:
        """Whether the tiles cover the image exactly (H and W multiples of r)."""
        return (self.r * self.th, self.r * self.tw) == (self.h, self.w)

    def chunks(self):
        for n0 in range(0, self.n, self.nb):
            yield n0, min(self.nb, self.n - n0)

    def workspaces(self, kind: str, dtype) -> list[tuple]:
        """Scratch in request order; kind 'forward' (a conv, also used for the input gradient) or 'filter'."""
        th, tw, nb, c, k, r, a = self.th, self.tw, self.nb, self.c, self.k, self.r, self.a
        ws = [((r * th + 2, self.w, nb * c), dtype),           # x, HWNC, a zero row above, zero rows below
              ((a, th, r * tw + 2, nb * c), dtype),            # row-transformed, zero columns each side
              ((a * a, th * tw * nb, c), dtype)]               # V: transformed input
        if kind == "forward":
            ws += [((a * a, th * tw * nb, k), dtype),          # M = V @ U (U, the filter's, is shared)
                   ((a, r, th, tw, nb * k), dtype),            # column-transformed M
                   ((r * th, r * tw, nb, k), dtype)]           # y, HWNC, whole tiles
            if not self.exact:
                ws.append(((nb, k, r * th * r * tw), dtype))   # y, NCHW, whole tiles
        else:
            ws += [((r * th, self.w, nb * k), dtype),          # dy, HWNC, zero rows below to whole tiles
                   ((a, th, r * tw, nb * k), dtype),           # row-transformed dy, zero columns to whole tiles
                   ((a * a, th * tw * nb, k), dtype),          # transformed dy
                   ((a * a, c, k), dtype)]                     # the summed V^T @ dM
            if nb < self.n:  # a later chunk's V^T @ dM: not in one chunk (F(4x4)'s of conv5, 1.2 MB, took
                # Mentee's 12 MB plan, one image a micro-batch, to 12.96 MB: tests/planner/test_floors.py)
                ws.append(((a * a, c, k), dtype))
        if r == 4:  # _bt4, _at4 and _a4's shared term: as large as a column pass's output, a * tiles * images
            ws.append(((a * th * tw * nb * max(c, k),), dtype))
        return ws


# The layout changes were GEMMs with the identity (2C FLOPs an element); one NumPy copy of the whole chunk's
# transposed view takes 0.3-4x their time by shape (its strided side misses the cache: 32 channels of 32x32 the
# worst). In pieces that stay in cache the copies run 2.5-6x faster than the GEMM (_to_hwnc, Mentee's conv3-5 at
# batch 32, one thread) or 1.3-4.5x (_from_hwnc; the same for 32 channels of 16x16), and need no identity matrices.
_HWNC_POSITIONS = 16


def _to_hwnc(src: np.ndarray, dst: np.ndarray) -> None:
    """dst (H*W, m, C) = src (m, C, H, W) transposed, an image at a time."""
    m, c = src.shape[:2]
    images = src.reshape(m, c, -1)
    for i in range(m):
        np.copyto(dst[:, i], images[i].T)


def _from_hwnc(src: np.ndarray, dst: np.ndarray) -> None:
    """dst (m, K, H*W) = src (H*W, m, K) transposed, _HWNC_POSITIONS positions of every image at a time."""
    for p in range(0, src.shape[0], _HWNC_POSITIONS):
        np.copyto(dst[:, :, p:p + _HWNC_POSITIONS], src[p:p + _HWNC_POSITIONS].transpose(1, 2, 0))


def _tmp(buf, shape):
    """F(4x4)'s scratch for a shared term, seen as `shape`; F(2x2)'s transforms need none."""
    return None if buf is None else _prefix(buf, shape)


def _input_transform(x: np.ndarray, t: Tiles, xp, tr, v, tmp) -> np.ndarray:
    """V[a*i+j] (tiles x m, C) = B^T d B for every (r + 2)^2 input tile d of the m images x (m, C, H, W)."""
    m, c, h, w = x.shape
    th, tw, r, a = t.th, t.tw, t.r, t.a
    xp = _prefix(xp, (r * th + 2, w, m * c))
    xp[0] = 0
    xp[h + 1:] = 0
    _to_hwnc(x, xp[1:h + 1].reshape(h * w, m, c))
    tr = _prefix(tr, (a, th, r * tw + 2, m * c))
    tr[:, :, 0] = 0
    tr[:, :, w + 1:] = 0
    inner = tr[:, :, 1:w + 1]
    _BT[r]([xp[p:p + r * th:r] for p in range(a)], inner, _tmp(tmp, inner.shape[1:]))
    v = _prefix(v, (a, a, th, tw, m * c))  # all the rows' columns at once: fewer, longer NumPy calls
    _BT[r]([tr[:, :, q:q + r * tw:r] for q in range(a)], v.transpose(1, 0, 2, 3, 4),
           _tmp(tmp, (a, th, tw, m * c)))
    return v.reshape(a * a, th * tw * m, c)


def _wino_conv(ctx, x: np.ndarray, shared: list, y: np.ndarray, div: int = 1, r: int = 2) -> None:
    """y (N, K, H, W) = the SAME 3x3 conv of x (N, C, H, W) with the filter f (3, 3, C, K) whose transform U
    shared holds (_shared), by F(r x r, 3x3)."""
    n, c, h, w = x.shape
    k = y.shape[1]
    t = Tiles.of(n, c, k, h, w, x.itemsize, div, r)
    bufs = [ctx.workspace(s, d) for s, d in t.workspaces("forward", as_dtype(x.dtype))]
    xp, tr, v, mm, z, yt = bufs[:6]
    stage = None if t.exact else bufs[6]
    tmp = bufs[-1] if r == 4 else None
    u = shared[0]
    th, tw, a = t.th, t.tw, t.a
    for n0, m in t.chunks():
        vv = _input_transform(x[n0:n0 + m], t, xp, tr, v, tmp)
        prod = _prefix(mm, (a * a, th * tw * m, k))
        np.matmul(vv, u, out=prod)
        prod = prod.reshape(a, a, th, tw, m * k)
        zz = _prefix(z, (a, r, th, tw, m * k))  # M A per row of tiles, all the rows at once
        _AT[r](prod.transpose(1, 0, 2, 3, 4), zz.transpose(1, 0, 2, 3, 4), _tmp(tmp, (a, th, tw, m * k)))
        out = _prefix(yt, (r * th, r * tw, m, k))
        o = out.reshape(th, r, tw, r, m * k)
        _AT[r](zz.transpose(0, 2, 3, 1, 4), o.transpose(1, 0, 2, 3, 4), _tmp(tmp, (th, tw, r, m * k)))
        dst = y[n0:n0 + m]
        if t.exact:
            _from_hwnc(out.reshape(h * w, m, k), dst.reshape(m, k, h * w))
        else:
            whole = _prefix(stage, (m, k, r * th * r * tw))
            _from_hwnc(out.reshape(r * th * r * tw, m, k), whole)
            dst[...] = whole.reshape(m, k, r * th, r * tw)[:, :, :h, :w]


def _wino_filter(f: np.ndarray, u: np.ndarray, r: int = 2) -> np.ndarray:
    """u[a*i+j] (C, K) = G f G^T for every (c, k) of f (3, 3, C, K); u is ((r + 2)^2, C, K)."""
    return np.matmul(_FILTER[r].astype(f.dtype), f.reshape(9, -1), out=u.reshape(len(_FILTER[r]), -1))


def _wino_backprop_filter(ctx, x: np.ndarray, dy: np.ndarray, df: np.ndarray, shared: list, div: int = 1,
                          r: int = 2) -> None:
    """df = G^T (sum over tiles of V^T dM) G, dM = A dy A^T per r x r tile of dy (the output transform's
    adjoint), V the input transform of x."""
    n, c, h, w = x.shape
    k = dy.shape[1]
    t = Tiles.of(n, c, k, h, w, x.itemsize, div, r)
    bufs = [ctx.workspace(s, d) for s, d in t.workspaces("filter", as_dtype(x.dtype))]
    xp, tr, v, dyt, rt, dm, acc = bufs[:7]
    part = bufs[7] if t.nb < n else None
    tmp = bufs[-1] if r == 4 else None
    th, tw, a = t.th, t.tw, t.a
    for i, (n0, m) in enumerate(t.chunks()):
        vv = _input_transform(x[n0:n0 + m], t, xp, tr, v, tmp)
        d = _prefix(dyt, (r * th, w, m * k))
        d[h:] = 0
        _to_hwnc(dy[n0:n0 + m], d[:h].reshape(h * w, m, k))
        rows = _prefix(rt, (a, th, r * tw, m * k))
        rows[:, :, w:] = 0
        _A[r]([d[p::r] for p in range(r)], rows[:, :, :w], _tmp(tmp, (th, w, m * k)))
        g = _prefix(dm, (a, a, th, tw, m * k))  # all the rows' columns at once
        _A[r]([rows[:, :, q::r] for q in range(r)], g.transpose(1, 0, 2, 3, 4), _tmp(tmp, (a, th, tw, m * k)))
        np.matmul(vv.transpose(0, 2, 1), g.reshape(a * a, th * tw * m, k), out=acc if i == 0 else part)
        if i:
            acc += part
    np.matmul(_GRAD_T[r].astype(df.dtype), acc.reshape(a * a, -1), out=df.reshape(9, -1))  # G^T acc G summed


# -- kernels and their workspaces ----------------------------------------------------------------------------
def _specs_geometry(x_shape, f_shape, y_shape, attrs) -> Geometry:
    return geometry(tuple(int(d) for d in x_shape), f_shape, tuple(int(d) for d in y_shape), attrs)


def _out_shape(x_shape, f_shape, attrs) -> tuple:
    """Conv2D's output shape (the kernel gets it as its output buffer; workspace functions compute it)."""
    fmt = attrs["data_format"]
    n, h, w, _ = _nhwc_shape(x_shape, fmt)
    _, sh, sw, _ = _nhwc_shape(attrs["strides"], fmt)
    kh, kw, _, k = f_shape
    ho, wo = conv_output(h, kh, sh, attrs["padding"])[0], conv_output(w, kw, sw, attrs["padding"])[0]
    return (n, ho, wo, k) if fmt == "NHWC" else (n, k, ho, wo)


def _fast_shard_workspaces(kind: str, n: int, c: int, k: int, h: int, w: int, dtype, div: int = 1) -> list:
    """Scratch of the fast path for a conv of c into k channels on n images; kind 'forward' or 'filter'."""
    path = _path(c, k, h, w)
    if path in _TILE:
        return Tiles.of(n, c, k, h, w, dtype.size, div, _TILE[path]).workspaces(kind, dtype)
    return Shift.of(h, w, c).workspaces(kind, n, c, k, dtype, div)


def _shared_workspaces(path: str, kind: str, c: int, k: int, h: int, w: int, dtype) -> list[tuple]:
    """What a fast-path call's image tasks share, read-only, in request order (before theirs): the filter as
    Winograd's U or as the shift path's GEMM left matrix (forward; a filter gradient shares nothing). Made once per
    call (_shared) instead of once per task."""
    if kind != "forward":
        return []
    if path in _TILE:
        return [(((_TILE[path] + 2) ** 2, c, k), dtype)]
    sh = Shift.of(h, w, c)
    return [((sh.groups * k, sh.taps * c), dtype)]


def _shared(ctx, path: str, kind: str, f, c: int, k: int, h: int, w: int, dtype) -> list[np.ndarray]:
    """The buffers of _shared_workspaces, filled (f: the forward conv's filter (3, 3, c, k); None for 'filter')."""
    bufs = [ctx.workspace(s, d) for s, d in _shared_workspaces(path, kind, c, k, h, w, dtype)]
    if kind == "forward" and path in _TILE:
        _wino_filter(f, bufs[0], _TILE[path])
    elif kind == "forward":
        Shift.of(h, w, c).weights(f, bufs[0])
    return bufs


def _fast_conv(ctx, x: np.ndarray, shared: list, y: np.ndarray, div: int = 1) -> None:
    _, c, h, w = x.shape
    path = _path(c, y.shape[1], h, w)
    if path in _TILE:
        _wino_conv(ctx, x, shared, y, div, _TILE[path])
    else:
        _shift_conv(ctx, x, shared, y, div)


def _fast_backprop_filter(ctx, x: np.ndarray, dy: np.ndarray, df: np.ndarray, shared: list, div: int = 1) -> None:
    _, c, h, w = x.shape
    path = _path(c, dy.shape[1], h, w)
    if path in _TILE:
        _wino_backprop_filter(ctx, x, dy, df, shared, div, _TILE[path])
    else:
        _shift_backprop_filter(ctx, x, dy, df, shared, div)


# -- image shards: one per intra-op thread ---------------------------------------------------------------------
class _Scratch:
    """A task's kernel context: hands out, in order, its thread's scratch (requested by the calling thread: the
    executor's workspace cursor is per kernel call). A thread's buffers are flat and sized for the largest
    request of any task (tasks differ by an image at most), and a request gets their start."""

    def __init__(self, bufs: list[np.ndarray]):
        self._bufs = iter(bufs)

    def workspace(self, shape, dtype) -> np.ndarray:
        return _prefix(next(self._bufs), shape)


def _grain(per_image_flops: int, least: int = 1) -> int:
    """Images per task at least: a task computes ~0.5 ms or more (threads.flop_grain), so that small batches or
    layers are not cut into tasks whose dispatch and GIL hand-offs cost more than they save; and `least`."""
    return max(least, threads.flop_grain(per_image_flops))


def _fast_grain(n: int, c: int, k: int, h: int, w: int) -> int:
    """The fast paths' grain for a call on n images. A Winograd task's chunk transforms and 16 GEMMs of (tiles x
    images) rows cost ~120 us of Python and dispatch (holding the GIL) whatever its size, and 2 images cost 1.4x
    as much per image as 8 (conv4 of Mentee, one thread): 8 images at least, unless the call has fewer than 8
    per thread (a micro-batch of a streamed prefix: 8 images in one task left the second core idle, +73% wall
    time), where smaller tasks beat idle threads."""
    least = 8 if _path(c, k, h, w) in _TILE else 1
    return _grain(18 * h * w * c * k, min(least, max(1, n // threads.current())))


def _generic_flops(g: Geometry) -> int:
    return 2 * g.ho * g.wo * g.kh * g.kw * g.c * g.k


def _thread_workspaces(ranges, shard_ws) -> list[tuple]:
    """One thread's scratch: flat buffers as long as the longest request of a task of any length in `ranges`."""
    per_length = [shard_ws(m) for m in sorted({hi - lo for lo, hi in ranges})]
    return [((max(math.prod(ws[i][0]) for ws in per_length),), per_length[0][i][1])
            for i in range(len(per_length[0]))]


def _sharded_workspaces(n: int, grain: int, shard_ws, partial: tuple | None = None) -> list[tuple]:
    """The scratch of a kernel over image tasks of at least `grain` images (threads.tasks): one set per thread
    that runs them (_thread_workspaces), then for a sum over the images one `partial` result buffer (shape,
    dtype) per task after the first."""
    ranges = threads.tasks(n, grain)
    ws = _thread_workspaces(ranges, shard_ws) * threads.slots(len(ranges))
    return ws + [partial] * (len(ranges) - 1) if partial else ws


def _over_images(ctx, n: int, grain: int, shard_ws, body, out: np.ndarray, summed: bool = False) -> None:
    """body(scratch, lo, hi, dst) for each image task [lo, hi), shared out over the threads (threads.run_shared),
    with the scratch _sharded_workspaces declares. dst is `out`; for a sum over the images (summed) it is the
    task's partial result (out itself for the first), and the partials are added into out in task order, so
    that the sum does not depend on which thread ran which task."""
    ranges = threads.tasks(n, grain)
    per_thread = _thread_workspaces(ranges, shard_ws)
    scratch = [[ctx.workspace(*w) for w in per_thread] for _ in range(threads.slots(len(ranges)))]
    dst = [out] + [ctx.workspace(out.shape, as_dtype(out.dtype)) if summed else out for _ in ranges[1:]]
    threads.run_shared(lambda slot, i: body(_Scratch(scratch[slot]), *ranges[i], dst[i]), range(len(ranges)))
    if summed and len(dst) > 1:
        flat = [d.reshape(-1) for d in dst]  # NOTE: views: outputs are contiguous, as the paths' out= assume

        def add(lo: int, hi: int) -> None:  # each element sums the partials in task order, whatever the split
            for part in flat[1:]:
                flat[0][lo:hi] += part[lo:hi]
        threads.parallel_for(out.size, add, max(1, threads.GRAIN // (len(dst) - 1)))


def _fast_ws(kind: str, n: int, c: int, k: int, h: int, w: int, dtype, div: int):
    """shard_ws of the fast path."""
    return lambda m: _fast_shard_workspaces(kind, m, c, k, h, w, dtype, div)


def _generic_ws(g: Geometry, dtype, kind: str, fmt: str, div: int):
    """shard_ws of the generic path."""
    return lambda m: _generic_workspaces(g._replace(n=m), dtype, kind, fmt, div)


@register_kernel("Conv2D", "cpu", FLOATS, chunk=ChunkSpec(batch=(0,), scratch_divisor=True))
def _conv2d(ctx, ins, outs, attrs):
    x, f = ins
    y = outs[0]
    if x.size == 0 or y.size == 0:
        y.fill(0)
    elif is_fast(x.shape, f.shape, attrs):
        n, c, h, w = x.shape
        k, dtype = f.shape[3], as_dtype(x.dtype)
        shared = _shared(ctx, _path(c, k, h, w), "forward", f, c, k, h, w, dtype)
        _over_images(ctx, n, _fast_grain(n, c, k, h, w), _fast_ws("forward", n, c, k, h, w, dtype, _divisor(attrs)),
                     lambda sc, lo, hi, out: _fast_conv(sc, x[lo:hi], shared, out[lo:hi], _divisor(attrs)), y)
    else:
        g = geometry(x.shape, f.shape, y.shape, attrs)
        _over_images(ctx, g.n, _grain(_generic_flops(g)),
                     _generic_ws(g, as_dtype(x.dtype), "forward", attrs["data_format"], _divisor(attrs)),
                     lambda sc, lo, hi, out: _conv2d_generic(sc, x[lo:hi], f, out[lo:hi], attrs), y)


@register_workspace("Conv2D", "cpu")
def _conv2d_ws(ins, attrs):
    x, f = ins
    if is_fast(x.shape, f.shape, attrs):
        n, c, h, w = x.shape
        k = f.shape[3]
        return (_shared_workspaces(_path(c, k, h, w), "forward", c, k, h, w, x.dtype)
                + _sharded_workspaces(n, _fast_grain(n, c, k, h, w), _fast_ws("forward", n, c, k, h, w, x.dtype,
                                                                           _divisor(attrs))))
    g = _specs_geometry(x.shape, f.shape, _out_shape(x.shape, f.shape, attrs), attrs)
    return _sharded_workspaces(g.n, _grain(_generic_flops(g)),
                               _generic_ws(g, x.dtype, "forward", attrs["data_format"], _divisor(attrs)))


@register_kernel("Conv2DBackpropInput", "cpu", FLOATS, chunk=ChunkSpec(batch=(2,), size=0, scratch_divisor=True))
def _conv2d_backprop_input(ctx, ins, outs, attrs):
    _, f, dy = ins
    dx = outs[0]
    if dy.size == 0 or dx.size == 0:
        dx.fill(0)
    elif is_fast(dx.shape, f.shape, attrs):
        n, c, h, w = dx.shape
        k, dtype = f.shape[3], as_dtype(dy.dtype)  # a conv of dy's k channels into c
        shared = _shared(ctx, _path(k, c, h, w), "forward", _flipped(f), k, c, h, w, dtype)
        _over_images(ctx, n, _fast_grain(n, k, c, h, w), _fast_ws("forward", n, k, c, h, w, dtype, _divisor(attrs)),
                     lambda sc, lo, hi, out: _fast_conv(sc, dy[lo:hi], shared, out[lo:hi], _divisor(attrs)), dx)
    else:
        g = geometry(dx.shape, f.shape, dy.shape, attrs)
        _over_images(ctx, g.n, _grain(_generic_flops(g)),
                     _generic_ws(g, as_dtype(dy.dtype), "input", attrs["data_format"], _divisor(attrs)),
                     lambda sc, lo, hi, out: _conv2d_backprop_input_generic(sc, f, dy[lo:hi], out[lo:hi], attrs),
                     dx)


@register_workspace("Conv2DBackpropInput", "cpu")
def _conv2d_backprop_input_ws(ins, attrs):
    sizes, f, dy = ins
    x_shape = tuple(np.asarray(sizes.value).tolist())
    if is_fast(x_shape, f.shape, attrs):
        n, c, h, w = x_shape
        k = f.shape[3]
        return (_shared_workspaces(_path(k, c, h, w), "forward", k, c, h, w, f.dtype)
                + _sharded_workspaces(n, _fast_grain(n, k, c, h, w), _fast_ws("forward", n, k, c, h, w, f.dtype,
                                                                           _divisor(attrs))))
    g = _specs_geometry(x_shape, f.shape, dy.shape, attrs)
    return _sharded_workspaces(g.n, _grain(_generic_flops(g)),
                               _generic_ws(g, f.dtype, "input", attrs["data_format"], _divisor(attrs)))


@register_kernel("Conv2DBackpropFilter", "cpu", FLOATS,
                 chunk=ChunkSpec(batch=(0, 2), summed=True, scratch_divisor=True))
def _conv2d_backprop_filter(ctx, ins, outs, attrs):
    x, _, dy = ins
    df = outs[0]
    if x.size == 0 or dy.size == 0:  # an empty batch: no contributions
        df.fill(0)
    elif is_fast(x.shape, df.shape, attrs):
        n, c, h, w = x.shape
        k, dtype = df.shape[3], as_dtype(x.dtype)
        shared = _shared(ctx, _path(c, k, h, w), "filter", None, c, k, h, w, dtype)
        _over_images(ctx, n, _fast_grain(n, c, k, h, w),
                     _fast_ws("filter", n, c, k, h, w, dtype, _divisor(attrs)),
                     lambda sc, lo, hi, out: _fast_backprop_filter(sc, x[lo:hi], dy[lo:hi], out, shared,
                                                                   _divisor(attrs)),
                     df, summed=True)
    else:
        g = geometry(x.shape, df.shape, dy.shape, attrs)
        _over_images(ctx, g.n, _grain(_generic_flops(g)),
                     _generic_ws(g, as_dtype(x.dtype), "filter", attrs["data_format"], _divisor(attrs)),
                     lambda sc, lo, hi, out: _conv2d_backprop_filter_generic(sc, x[lo:hi], dy[lo:hi], out, attrs),
                     df, summed=True)


@register_workspace("Conv2DBackpropFilter", "cpu")
def _conv2d_backprop_filter_ws(ins, attrs):
    x, sizes, dy = ins
    f_shape = tuple(np.asarray(sizes.value).tolist())
    if is_fast(x.shape, f_shape, attrs):
        n, c, h, w = x.shape
        k = f_shape[3]
        return (_shared_workspaces(_path(c, k, h, w), "filter", c, k, h, w, x.dtype)
                + _sharded_workspaces(n, _fast_grain(n, c, k, h, w),
                                      _fast_ws("filter", n, c, k, h, w, x.dtype, _divisor(attrs)), (f_shape, x.dtype)))
    g = _specs_geometry(x.shape, f_shape, dy.shape, attrs)
    return _sharded_workspaces(g.n, _grain(_generic_flops(g)),
                               _generic_ws(g, x.dtype, "filter", attrs["data_format"], _divisor(attrs)),
                               (f_shape, x.dtype))


# -- DepthwiseConv2dNative and its backprops -----------------------------------------------------------------
# Per filter tap and channel multiplier m, one broadcast multiply of a strided view of the (padded) input by
# the tap's per-channel weights, accumulated. Scratch, in request order: the zero-padded input (or input
# gradient) when the window reaches past the border, and one product of the output's size per multiplier.
def _depthwise_geometry(x_shape, f_shape, attrs) -> Geometry:
    kh, kw, c, m = (int(d) for d in f_shape)
    y_shape = _out_shape(x_shape, (kh, kw, c, c * m), attrs)
    return _specs_geometry(x_shape, (kh, kw, c, c * m), y_shape, attrs)


def _depthwise_workspaces(g: Geometry, dtype, fmt: str) -> list[tuple]:
    ws = []
    if g.padded:
        ws.append(((g.n, g.hp, g.wp, g.c) if fmt == "NHWC" else (g.n, g.c, g.hp, g.wp), dtype))
    ws.append(((g.n, g.ho, g.wo, g.c) if fmt == "NHWC" else (g.n, g.c, g.ho, g.wo), dtype))
    return ws


class _Depthwise:
    """One depthwise kernel call's geometry and scratch (NHWC views whatever the data format)."""

    def __init__(self, ctx, x_shape, f_shape, attrs, dtype):
        fmt = attrs["data_format"]
        self.g = g = _depthwise_geometry(x_shape, f_shape, attrs)
        self.m = int(f_shape[3])
        bufs = [ctx.workspace(s, d) for s, d in _depthwise_workspaces(g, as_dtype(dtype), fmt)]
        self.padded = _nhwc(bufs[0], fmt) if g.padded else None
        self.prod = _nhwc(bufs[-1], fmt)
        if self.padded is not None:
            self.padded.fill(0)

    def interior(self) -> np.ndarray:
        g = self.g
        return self.padded[:, g.pt:g.pt + g.h, g.pl:g.pl + g.w]

    def source(self, x: np.ndarray) -> np.ndarray:
        """x (NHWC view) inside its zero border, when there is one."""
        if self.padded is None:
            return x
        self.interior()[...] = x
        return self.padded

    def per_multiplier(self, a: np.ndarray) -> np.ndarray:
        """An output-shaped NHWC view (..., C * M) as (..., C, M): always a view (one axis split)."""
        return a.reshape(a.shape[:3] + (self.g.c, self.m))


@register_workspace("DepthwiseConv2dNative", "cpu")
def _depthwise_ws(ins, attrs):
    x, f = ins
    return _depthwise_workspaces(_depthwise_geometry(x.shape, f.shape, attrs), x.dtype, attrs["data_format"])


@register_kernel("DepthwiseConv2dNative", "cpu", FLOATS)
def _depthwise(ctx, ins, outs, attrs):
    x, f = ins
    fmt = attrs["data_format"]
    s = _Depthwise(ctx, x.shape, f.shape, attrs, x.dtype)
    y = s.per_multiplier(_nhwc(outs[0], fmt))
    first = True
    for a, b, view in _taps(s.source(_nhwc(x, fmt)), s.g):
        for m in range(s.m):
            if first:
                np.multiply(view, f[a, b, :, m], out=y[..., m])
            else:
                np.multiply(view, f[a, b, :, m], out=s.prod)
                np.add(y[..., m], s.prod, out=y[..., m])
        first = False


@register_workspace("DepthwiseConv2dNativeBackpropInput", "cpu")
def _depthwise_backprop_input_ws(ins, attrs):
    sizes, f, _ = ins
    x_shape = tuple(np.asarray(sizes.value).tolist())
    return _depthwise_workspaces(_depthwise_geometry(x_shape, f.shape, attrs), f.dtype, attrs["data_format"])


@register_kernel("DepthwiseConv2dNativeBackpropInput", "cpu", FLOATS)
def _depthwise_backprop_input(ctx, ins, outs, attrs):
    _, f, dy = ins
    fmt = attrs["data_format"]
    dx = _nhwc(outs[0], fmt)
    s = _Depthwise(ctx, outs[0].shape, f.shape, attrs, f.dtype)
    dst = dx if s.padded is None else s.padded
    dst[...] = 0
    dym = s.per_multiplier(_nhwc(dy, fmt))
    for a, b, view in _taps(dst, s.g):
        for m in range(s.m):
            np.multiply(dym[..., m], f[a, b, :, m], out=s.prod)
            np.add(view, s.prod, out=view)
    if s.padded is not None:
        np.copyto(dx, s.interior())


@register_workspace("DepthwiseConv2dNativeBackpropFilter", "cpu")
def _depthwise_backprop_filter_ws(ins, attrs):
    x, sizes, _ = ins
    f_shape = tuple(np.asarray(sizes.value).tolist())
    return _depthwise_workspaces(_depthwise_geometry(x.shape, f_shape, attrs), x.dtype, attrs["data_format"])


@register_kernel("DepthwiseConv2dNativeBackpropFilter", "cpu", FLOATS)
def _depthwise_backprop_filter(ctx, ins, outs, attrs):
    x, _, dy = ins
    df = outs[0]
    fmt = attrs["data_format"]
    s = _Depthwise(ctx, x.shape, df.shape, attrs, x.dtype)
    dym = s.per_multiplier(_nhwc(dy, fmt))
    for a, b, view in _taps(s.source(_nhwc(x, fmt)), s.g):
        for m in range(s.m):
            np.multiply(view, dym[..., m], out=s.prod)
            np.sum(s.prod, axis=(0, 1, 2), out=df[a, b, :, m])
