"""The 3x3 stride-1 SAME convolution variants (kernels/opencl/conv.py TFPLUS_CONV_VARIANTS: conv.cl's conv3 and
conv3_wgrad, with and without gemm.cl's vector register tiles and double local buffers) against the NumPy
kernels: forward (plain and with the fused bias and ReLU), input and filter gradients, both layouts, split sums
finished in the kernel or by a pass, and the shapes the variants leave to the general kernels. float64 agrees to
1e-12, float32 as test_opencl.py's GEMM-based kernels."""
from __future__ import annotations

import contextlib
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import needs_opencl

import tfplus as tf

pytestmark = needs_opencl

ALL = "fwd3x3,dx3x3,dw3x3"


def _run_both(build, arrays, dtype):
    """`build(*placeholders)` on the cpu and on opencl: the same values."""
    g = tf.Graph()
    with g.as_default():
        phs = [tf.placeholder(tf.as_dtype(a.dtype), a.shape) for a in arrays]
        outs = build(*phs)
    feeds = dict(zip(phs, arrays))
    with tf.Session(graph=g) as s:
        want = s.run(outs, feeds)
    with tf.Session(graph=g, device="opencl") as s:
        got = s.run(outs, feeds)
    rtol, atol = (1e-4, 1e-4) if dtype == np.float32 else (1e-12, 1e-12)
    for k, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol * max(1.0, float(np.abs(b).max())),
                                   err_msg=f"output {k} ({outs[k].op.type})")


@pytest.fixture
def built(monkeypatch):
    """The conv.cl kernels the launchers build (names; `+epilogue` where built with the bias and activation)."""
    from tfplus.kernels.opencl import conv
    names: list[str] = []
    make = conv.kernel

    def kernel(rt, src, base, *a, **k):
        names.append(base + ("+epilogue" if k.get("EPILOGUE") else ""))
        return make(rt, src, base, *a, **k)
    monkeypatch.setattr(conv, "kernel", kernel)
    return names


def _layer(x, f, b, dy, fmt):
    """conv(x, f); a Mentee layer, relu(conv(x, f) + b), which the graph rewrite makes one _FusedConv2DBiasRelu
    (conv3's epilogue); the gradients of conv(x, f) . dy."""
    def conv():
        return tf.nn.conv2d(x, f, strides=1, padding="SAME", data_format=fmt)
    y = conv()
    z = tf.nn.relu(tf.nn.bias_add(conv(), b, data_format=fmt))
    return [y, z, *tf.gradients(y, [x, f], grad_ys=dy)]


# The tile forms in float32 NCHW (Mentee's), the other layout and float64 under some (each case builds its own
# programs: the channels are compile-time; test_vector_tiles_of_several_runs has vtile alone).
@pytest.mark.parametrize("fmt,variants,dtype", [
    ("NCHW", ALL, np.float32), ("NCHW", ALL + ",vtile,dbuf", np.float32), ("NHWC", ALL + ",dbuf", np.float32),
    ("NCHW", ALL + ",vtile,dbuf", np.float64)])
def test_conv3_variants_match_numpy(monkeypatch, built, fmt, variants, dtype):
    """Odd image sizes, a batch that fills no tile, 16 channels (two K slices a tap in PoCL's tile, TK 8), input
    channels (dx's rows) that fill no tile."""
    monkeypatch.setenv("TFPLUS_CONV_VARIANTS", variants)
    rng = np.random.default_rng(len(variants) + len(fmt))
    for n, h, w, cin, cout in [(3, 7, 9, 16, 32)]:
        xs = (n, cin, h, w) if fmt == "NCHW" else (n, h, w, cin)
        x, f = rng.standard_normal(xs).astype(dtype), rng.standard_normal((3, 3, cin, cout)).astype(dtype)
        b = rng.standard_normal(cout).astype(dtype)
        dy = rng.standard_normal((n, cout, h, w) if fmt == "NCHW" else (n, h, w, cout)).astype(dtype)
        _run_both(lambda x, f, b, dy: _layer(x, f, b, dy, fmt), [x, f, b, dy], dtype)
    assert {"conv3", "conv3+epilogue", "conv3_wgrad"} <= set(built), built
    assert not {"conv", "conv+epilogue", "conv_wgrad"} & set(built), built


@pytest.mark.parametrize("tile", [(64, 32, 16, 8, 4), (32, 64, 8, 4, 8)])
def test_vector_tiles_of_several_runs(monkeypatch, built, tile):
    """Tiles whose threads own two runs of 4 rows (or columns), TY * 4 (TX * 4) apart (gemm.cl's GEMM_ROW): the
    device's one tile is made such a tile (PoCL's own has one run a thread)."""
    from tfplus.kernels.opencl import _tune
    monkeypatch.setattr(_tune, "CPU_TILE", tile)
    monkeypatch.setenv("TFPLUS_CONV_VARIANTS", ALL + ",vtile")
    rng = np.random.default_rng(9)
    x, f = rng.standard_normal((3, 32, 6, 7)).astype(np.float32), rng.standard_normal((3, 3, 32, 80)).astype(np.float32)
    b, dy = rng.standard_normal(80).astype(np.float32), rng.standard_normal((3, 80, 6, 7)).astype(np.float32)
    _run_both(lambda x, f, b, dy: _layer(x, f, b, dy, "NCHW"), [x, f, b, dy], np.float32)
    assert {"conv3", "conv3_wgrad"} <= set(built), built


@pytest.mark.parametrize("finish", [True, False])
def test_conv3_split_sums(monkeypatch, built, finish):
    """On a device made to look wide the sums split over work-group layers (as conv.py's general kernels): the
    last layer of a tile adds them up, or (filter gradients) a second pass does; same values. dwfinish finishes
    the filter gradient's in the kernel however many they are."""
    from tfplus.kernels.opencl import conv
    split, wsplit = conv._splits, conv._wgrad_splits
    monkeypatch.setattr(conv, "_splits", lambda m, n, k, cu: split(m, n, k, 48))
    monkeypatch.setattr(conv, "_wgrad_splits", lambda m, n, p, cu, d=1: wsplit(m, n, p, 48, d))
    monkeypatch.setattr(conv, "WGRAD_FINISH_LOADS", 10 ** 6 if finish else 0)
    monkeypatch.setenv("TFPLUS_CONV_VARIANTS", ALL + ",vtile,dbuf")
    splits, finished = [], []
    run, wrun = conv._run_conv, conv._run_wgrad
    monkeypatch.setattr(conv, "_run_conv", lambda rt, plan, *a: splits.append(plan[5]) or run(rt, plan, *a))
    monkeypatch.setattr(conv, "_run_wgrad", lambda rt, plan, *a: finished.append(plan[6]) or wrun(rt, plan, *a))
    rng, dtype = np.random.default_rng(7), np.float32
    x, f = rng.standard_normal((2, 64, 16, 16)).astype(dtype), rng.standard_normal((3, 3, 64, 48)).astype(dtype)
    b, dy = rng.standard_normal(48).astype(dtype), rng.standard_normal((2, 48, 16, 16)).astype(dtype)
    _run_both(lambda x, f, b, dy: _layer(x, f, b, dy, "NCHW"), [x, f, b, dy], dtype)
    assert "conv3" in built and "conv3_wgrad" in built and max(splits) > 1, (built, splits)
    assert finished and all(done == finish for done in finished), finished
    if not finish:
        monkeypatch.setenv("TFPLUS_CONV_VARIANTS", ALL + ",dwfinish")
        finished.clear()
        _run_both(lambda x, f, b, dy: _layer(x, f, b, dy, "NCHW"), [x, f, b, dy], dtype)
        assert finished and all(finished), finished


def test_shapes_the_variants_do_not_cover_keep_the_general_kernels(monkeypatch, built):
    """A stride, VALID padding, a 5x5 filter or channels conv3 cannot slice (not a multiple of 16) run the general
    kernels under every variant; a strided filter gradient too."""
    monkeypatch.setenv("TFPLUS_CONV_VARIANTS", ALL + ",vtile")
    rng = np.random.default_rng(8)
    for cin, ks, stride, padding in [(16, 3, 2, "SAME"), (16, 3, 1, "VALID"), (16, 5, 1, "SAME"), (12, 3, 1, "SAME")]:
        x, f = rng.standard_normal((2, cin, 8, 8)).astype(np.float32), \
            rng.standard_normal((ks, ks, cin, 8)).astype(np.float32)

        def build(x, f, stride=stride, padding=padding):
            y = tf.nn.conv2d(x, f, strides=stride, padding=padding, data_format="NCHW")
            dy = tf.constant(rng.standard_normal(y.shape.as_list()).astype(np.float32))
            return [y, *tf.gradients(y, [x, f], grad_ys=dy)]
        _run_both(build, [x, f], np.float32)
    # 12 channels: the forward and input gradient (16 output channels: 8) keep conv; the filter gradient of a
    # stride-1 SAME 3x3 conv takes conv3_wgrad whatever its channels.
    assert "conv3" not in built and "conv" in built and "conv_wgrad" in built and "conv3_wgrad" in built, built


def test_the_tuner_tries_the_tiles_a_variant_can_build(monkeypatch):
    """On a GPU (faked: the tuner's view of one) vtile tunes over tiles whose threads own runs of 4 rows and
    columns, and dbuf over those whose two local buffers fit (float64: not 128 x 128 x 16 in 48 kB)."""
    from tfplus.kernels.opencl import _tune, conv
    monkeypatch.setenv("TFPLUS_OPENCL_TUNE_S", "inf")
    dev = SimpleNamespace(is_gpu=True, tuning={}, max_wg=1024, tune_seconds=0.0, save_tuning=lambda: None,
                          programs_of=lambda run, cfg: [], prebuild=lambda keys: 0)
    rt = SimpleNamespace(dev=dev, info={"local_mem_bytes": 49152}, synchronize=lambda: None, describe=lambda: "a GPU",
                         timing=lambda: contextlib.nullcontext([]))
    for v, itemsize in [({"vtile"}, 4), ({"vtile", "dbuf"}, 8), ({"dbuf"}, 8)]:
        defines, candidates, _ = conv._tiles(rt, v, itemsize)
        tried: list = []
        _tune.choose(rt, f"conv3_fwd{sorted(v)}|9x9x9", itemsize, tried.append, candidates)
        assert tried and set(tried) <= set(candidates), (v, tried)
        if "vtile" in v:
            assert defines["VTILE"] == 1 and all(c[3] % 4 == 0 and c[4] % 4 == 0 for c in tried)
        if "dbuf" in v:
            assert defines["DBUF"] == 1 and (128, 128, 16, 8, 8) not in tried
            assert all(2 * c[2] * (c[0] + c[1] + 8) * itemsize <= 49152 for c in tried)


def test_unknown_variant_names_the_flag(monkeypatch):
    from tfplus.kernels.opencl import conv
    monkeypatch.setenv("TFPLUS_CONV_VARIANTS", "fwd3x3,fast")
    with pytest.raises(ValueError, match=r"TFPLUS_CONV_VARIANTS.*'fast'.*fwd3x3, dx3x3, dw3x3, vtile, dbuf, dwfinish"):
        conv.variants()


def test_a_mentee_step_under_every_variant_trains_as_the_general_kernels(monkeypatch, built):
    """Three momentum steps of a narrow Mentee (every conv 16 wide, 8x8 images) on opencl, the variants off and all
    on: the same losses and weights (the sums run in the same order; float32 rounding apart)."""
    from tfplus.graphs.mentee import training_graph
    tg = training_graph(total_steps=10, seed=0, image_shape=(3, 8, 8),
                        model_kwargs={"conv_widths": (16,) * 5, "fc_widths": (16,)})
    rng = np.random.default_rng(10)
    feed = {tg.images: rng.standard_normal((4, 3, 8, 8)).astype(np.float32),
            tg.labels: rng.integers(0, 10, 4).astype(np.int32)}
    weights = list(tg.graph.get_collection("trainable_variables"))

    def train(variants):
        monkeypatch.setenv("TFPLUS_CONV_VARIANTS", variants)
        with tf.Session(graph=tg.graph, device="opencl") as s:
            s.run(tg.init_op)
            losses = [s.run([tg.train_op, tg.loss], feed)[1] for _ in range(3)]
            return losses, s.run(weights)
    (plain, w0), (varied, w1) = train(""), train(ALL + ",vtile,dbuf")
    np.testing.assert_allclose(varied, plain, rtol=1e-5)
    for a, b, v in zip(w1, w0, weights):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6, err_msg=v.name)
    assert plain[2] != plain[0] and {"conv3", "conv3_wgrad"} <= set(built), built
