"""conv.cl's conv3_halo and conv3_wgrad_halo (kernels/opencl/conv.py's `halo` and `dwhalo` variants, issue 37 stop
45): the 3x3 stride-1 SAME forward (plain, with the fused bias and ReLU), input gradient, the input gradient with a
ReLU / Relu6 mask folded in, and the filter gradient (split sums added by a pass), as direct convolutions over input
rows staged with their halo, against the NumPy kernels. Both layouts, float32 and
float64, image sizes and channel counts no tile divides (a partial strip of rows, padded row width, output
channels short of the tile), register tiles of one and two vector runs, the configs a GPU takes untuned for
Mentee's layers at its micro-batches and the evaluation's 500 images, and the shapes it leaves to other kernels.
float64 agrees to 1e-12, float32 as test_opencl.py's GEMM-based kernels."""
from __future__ import annotations

import contextlib
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import needs_opencl
from opencl_compare import conv3_arrays, conv_layer, run_both, run_conv_shapes

import tfplus as tf
from tfplus.framework import apply_op

pytestmark = needs_opencl

HALO = "fwd3x3,dx3x3,dw3x3,vtile,halo"


def _halos(conv_builds) -> list:
    return [(d["FLIP"], d.get("EPILOGUE", 0)) for name, d in conv_builds if name == "conv3_halo"]


# (n, h, w, cin, cout): 7 rows (PoCL's 2-row strips: a partial one) of 9 columns (runs of 4: padded to 12); 24 and
# 40 channels, no multiple of 16 (conv3 could not take them; halo sums them 8 a stage); dx's 16 rows of a 32-wide
# tile; a 1 x 1 image (all halo).
SHAPES = [(3, 7, 9, 16, 32), (2, 5, 12, 24, 40), (2, 1, 1, 16, 16)]


@pytest.mark.parametrize("fmt,dtype,tile", [
    ("NCHW", np.float32, None), ("NCHW", np.float32, (32, 4, 8, 8, 8)), ("NCHW", np.float32, (8, 3, 4, 4, 8)),
    ("NHWC", np.float32, None), ("NCHW", np.float64, None)])
def test_halo_matches_numpy(monkeypatch, conv_builds, fmt, dtype, tile):
    """Forward, fused forward, input gradient; the filter gradient stays conv3_wgrad's. `tile` replaces PoCL's
    (16, 2, 8, 4, 4): 8 x 8 outputs a work-item (two vector runs of channels and of columns), or 8 channels of 3
    rows, 4 channels a stage."""
    from tfplus.kernels.opencl import conv
    if tile:
        monkeypatch.setattr(conv, "HALO_CPU_TILE", tile)
    monkeypatch.setenv("TFPLUS_CONV_VARIANTS", HALO)
    rng = np.random.default_rng(len(fmt) + (tile or (0,))[0])
    for shape in SHAPES:
        run_both(lambda x, f, b, dy: conv_layer(x, f, b, dy, fmt), list(conv3_arrays(rng, dtype, fmt, *shape)))
    assert {(0, 0), (0, 1), (1, 0)} <= set(_halos(conv_builds)), conv_builds
    assert not {"conv3", "conv", "conv_small"} & {name for name, _ in conv_builds}, conv_builds
    if tile:
        halos = {(d["TM"], d["WM"], d["WN"]) for name, d in conv_builds if name == "conv3_halo"}
        assert halos == {(tile[0], *tile[3:])}


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_halo_input_gradient_with_the_relu_masks(monkeypatch, conv_builds, fmt):
    """_FusedConv2DBackpropInputReluGrad (the backward fold of a conv after a ReLU) on conv3_halo, EPILOGUE 3 (Relu)
    and 4 (Relu6): the mask applied as dx is written equals ReluGrad / Relu6Grad after the input gradient."""
    monkeypatch.setenv("TFPLUS_CONV_VARIANTS", HALO)
    rng = np.random.default_rng(5)
    x, f, _, dy = conv3_arrays(rng, np.float32, fmt, 2, 6, 8, 16, 32)

    def grads(x, f, dy):
        attrs = {"T": x.dtype, "strides": [1, 1, 1, 1], "padding": "SAME", "data_format": fmt,
                 "dilations": [1, 1, 1, 1]}
        r, sizes = tf.nn.relu(x), tf.shape(x)
        dx = apply_op("Conv2DBackpropInput", [sizes, f, dy], attrs)
        return [apply_op("ReluGrad", [dx, r], {"T": x.dtype}), apply_op("Relu6Grad", [dx, x * 4], {"T": x.dtype}),
                apply_op("_FusedConv2DBackpropInputReluGrad", [sizes, f, dy, r], {**attrs, "activation": "Relu"},
                         "dx_relu"),
                apply_op("_FusedConv2DBackpropInputReluGrad", [sizes, f, dy, x * 4],
                         {**attrs, "activation": "Relu6"}, "dx_relu6")]
    got = run_both(grads, [x, f, dy])
    np.testing.assert_array_equal(got[2], got[0])  # one kernel's sums, masked as they are written or after
    np.testing.assert_array_equal(got[3], got[1])
    assert {(1, 0), (1, 3), (1, 4)} <= set(_halos(conv_builds)), conv_builds


@pytest.fixture
def gpu_defaults(monkeypatch):
    """The PoCL device taken for a GPU that tunes nothing: each problem runs the config an untuned GPU takes
    (conv._halo_default), as Mentee's micro-batches do on the H200 until tuned."""
    from tfplus.runtime import opencl
    monkeypatch.setenv("TFPLUS_CONV_VARIANTS", HALO)
    monkeypatch.setenv("TFPLUS_OPENCL_TUNE", "0")
    monkeypatch.setattr(opencl.OpenCLRuntime().dev, "is_gpu", True)


@pytest.mark.parametrize("n", [32, 64])
def test_mentee_micro_batches_on_the_gpu_configs(conv_builds, gpu_defaults, n):
    """Mentee's conv5 width (8 x 8: one strip an image) at the micro-batches, each pass on its untuned GPU config:
    4 x 8 outputs a work-item over 64 channels (forward) and 32 (input gradient): the 8 x 8 configs of so short a
    strip have too few work-items, or stage more values each than HALO_PREFETCH. The channels are narrowed from
    conv5's to keep the test short."""
    from tfplus.kernels.opencl import conv
    rng = np.random.default_rng(n)
    run_both(lambda *a: conv_layer(*a, "NCHW"), list(conv3_arrays(rng, np.float32, "NCHW", n, 8, 8, 32, 64)))
    got = {(d["FLIP"], d["TM"], d["ROWS"], d["CC"], d["WM"], d["WN"])
           for name, d in conv_builds if name == "conv3_halo"}
    assert got == {(0, *conv._halo_default(conv._halo_candidates(64, 8, 8), 64, 8)),
                   (1, *conv._halo_default(conv._halo_candidates(32, 8, 8), 32, 8))}, got
    assert {c[1:] for c in got} == {(64, 8, 8, 4, 8), (32, 8, 8, 4, 8)}, got


def test_the_evaluation_batch_on_the_gpu_configs(conv_builds, gpu_defaults):
    """The evaluation's 500 images (forward only, as evaluation runs it) and Mentee's conv2 width (32 x 32: several
    strips an image) on the GPU config; the channels are narrowed to keep the test short."""
    from tfplus.kernels.opencl import conv
    rng = np.random.default_rng(500)
    for n, hw in [(500, 8), (3, 32)]:
        x, f, b, _ = conv3_arrays(rng, np.float32, "NCHW", n, hw, hw, 16, 32)
        run_both(lambda x, f, b: [tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, f, strides=1, padding="SAME",
                                                                          data_format="NCHW"), b,
                                                             data_format="NCHW"))], [x, f, b])
    want = [(hw, conv._halo_default(conv._halo_candidates(32, hw, hw), 32, hw)[1]) for hw in (8, 32)]
    assert sorted((d["IW"], d["ROWS"]) for name, d in conv_builds if name == "conv3_halo") == want, conv_builds
    assert want[0][1] == 8 and want[1][1] < 32, want


def test_shapes_halo_does_not_cover_keep_the_other_kernels(monkeypatch, conv_builds):
    """A stride, VALID padding or a 5x5 filter run the general kernels under halo; on a GPU, channels no stage
    divides (12: stages of 8 or 16) run what they would without halo (here the general kernels: conv3 needs 16s),
    where PoCL's tile cuts its stage to 4 and takes them."""
    from tfplus.runtime import opencl
    monkeypatch.setenv("TFPLUS_CONV_VARIANTS", HALO)
    rng = np.random.default_rng(8)
    run_conv_shapes(rng, [(16, 3, 2, "SAME"), (16, 3, 1, "VALID"), (16, 5, 1, "SAME")])
    assert not _halos(conv_builds) and {"conv", "conv_wgrad"} <= {name for name, _ in conv_builds}, conv_builds
    arrays = list(conv3_arrays(rng, np.float32, "NCHW", 2, 6, 6, 12, 12))
    run_both(lambda x, f, b, dy: conv_layer(x, f, b, dy, "NCHW"), arrays)
    assert {d["CC"] for name, d in conv_builds if name == "conv3_halo"} == {4}, conv_builds
    conv_builds.clear()
    monkeypatch.setenv("TFPLUS_OPENCL_TUNE", "0")
    monkeypatch.setattr(opencl.OpenCLRuntime().dev, "is_gpu", True)
    run_both(lambda x, f, b, dy: conv_layer(x, f, b, dy, "NCHW"), arrays)
    assert not _halos(conv_builds) and "conv" in {name for name, _ in conv_builds}, conv_builds


def test_the_tuner_tries_the_configs_that_fit():
    """On a GPU, halo tunes over its own configs (no GEMM tile rule applies) within the device's work-group size
    and local memory; Mentee's layers each have several, and an untuned GPU's is one of them."""
    from tfplus.kernels.opencl import _tune, conv
    dev = SimpleNamespace(is_gpu=True, tuning={}, max_wg=256, tune_seconds=0.0, save_tuning=lambda: None,
                          programs_of=lambda run, cfg: [], prebuild=lambda keys: 0)
    rt = SimpleNamespace(dev=dev, info={"local_mem_bytes": 32768}, timing=lambda: contextlib.nullcontext([]),
                         describe=lambda: "a GPU")
    for m, cin, hw in [(32, 32, 32), (64, 32, 16), (64, 64, 16), (128, 64, 8), (64, 128, 8)]:
        candidates = conv._halo_candidates(m, hw, hw)

        def fits(cfg, cin=cin, hw=hw):
            return conv._halo_fits(cfg, cin, hw, dev.max_wg, rt.info["local_mem_bytes"], 4)
        tried: list = []
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("TFPLUS_OPENCL_TUNE_S", "inf")
            best = _tune.choose(rt, f"conv3_fwdh|float32|01|w{hw}|{m}x1x{9 * cin}", 4, tried.append, candidates,
                                nearest=True, fits=fits, default=candidates[0])
        tried = sorted(set(tried))
        assert len(tried) >= 5 and set(tried) <= set(candidates) and best in tried, (m, tried)
        for tm, rows, cc, wm, wn in tried:
            iwp = -(-hw // wn) * wn
            assert tm // wm * rows * iwp // wn <= 256 and rows <= hw and cin % cc == 0
            assert (cc * (rows + 2) * (iwp + 12) + cc * (9 * tm + 4)) * 4 <= 32768
        assert conv._halo_default([c for c in candidates if fits(c)], m, hw) in tried


def _filter_grad(fmt):
    def build(x, f, dy):
        return tf.gradients(tf.nn.conv2d(x, f, strides=1, padding="SAME", data_format=fmt), [f], grad_ys=dy)
    return build


@pytest.mark.parametrize("fmt,dtype,tile", [
    ("NCHW", np.float32, None), ("NCHW", np.float32, (16, 32, 2, 2, 4)), ("NCHW", np.float32, (8, 32, 4, 1, 8)),
    ("NHWC", np.float32, None), ("NCHW", np.float64, None)])
def test_dwhalo_matches_numpy(monkeypatch, conv_builds, fmt, dtype, tile):
    """The filter gradient on conv3_wgrad_halo: PoCL's tile (8 x 16 channels, 2 rows a stage) and tiles of two input
    channels a work-item over 2 rows a stage, or 8 output channels over 4 rows (stages past the last row of a
    split); channel counts no tile divides, a 1 x 1 image (every tap but the centre across an edge)."""
    from tfplus.kernels.opencl import conv
    if tile:
        monkeypatch.setattr(conv, "DWHALO_CPU_TILE", tile)
    monkeypatch.setenv("TFPLUS_CONV_VARIANTS", HALO + ",dwhalo")
    rng = np.random.default_rng(len(fmt) + (tile or (0, 0))[1])
    for shape in SHAPES + [(2, 8, 8, 8, 32)]:  # and Mentee's conv5 width, two images
        x, f, _, dy = conv3_arrays(rng, dtype, fmt, *shape)
        run_both(_filter_grad(fmt), [x, f, dy])
    got = [d for name, d in conv_builds if name == "conv3_wgrad_halo"]
    assert len(got) == len(SHAPES) + 1 and "conv3_wgrad" not in {name for name, _ in conv_builds}, conv_builds
    if tile:
        assert {(d["TCI"], d["TCO"], d["SR"], d["WI"], d["WO"]) for d in got} == {tile}


def test_dwhalo_split_sums(monkeypatch, conv_builds):
    """On a device made to look wide the positions split over work-group layers (conv3_wgrad's splits): a layer
    sums the image rows whose first position its chunk holds (10 x 10 images: chunks of 272 positions end inside
    rows), a pass adds the layers up. The bias fold (_FusedConv2DBackpropFilterBiasAddGrad) and a layer of 3 input
    channels keep conv3_wgrad."""
    from tfplus.kernels.opencl import conv
    wsplit = conv._wgrad_splits
    splits: list = []
    monkeypatch.setattr(conv, "_wgrad_splits", lambda m, n, p, cu, d=1: splits.append(wsplit(m, n, p, 48, d)) or
                        wsplit(m, n, p, 48, d))
    monkeypatch.setattr(conv, "DWHALO_CPU_TILE", (16, 32, 2, 2, 4))
    monkeypatch.setenv("TFPLUS_CONV_VARIANTS", HALO + ",dwhalo")
    rng = np.random.default_rng(3)
    x, f, _, dy = conv3_arrays(rng, np.float32, "NCHW", 8, 10, 10, 32, 32)
    run_both(_filter_grad("NCHW"), [x, f, dy])
    assert splits and all(s > 1 and c % 10 for s, c in splits), splits

    def folded(x, f, dy):
        attrs = {"T": x.dtype, "strides": [1, 1, 1, 1], "padding": "SAME", "data_format": "NCHW",
                 "dilations": [1, 1, 1, 1]}
        return list(apply_op("_FusedConv2DBackpropFilterBiasAddGrad", [x, tf.constant([3, 3, 32, 32]), dy], attrs,
                             "dw_bias"))
    conv_builds.clear()
    got = run_both(folded, [x, f, dy])
    np.testing.assert_allclose(got[1], dy.sum(axis=(0, 2, 3)), rtol=1e-4, atol=1e-3)
    assert [name for name, _ in conv_builds] == ["conv3_wgrad"], conv_builds
    conv_builds.clear()  # an RGB layer (3 input channels) keeps conv3_wgrad too
    x3, f3, _, dy3 = conv3_arrays(rng, np.float32, "NCHW", 2, 6, 6, 3, 16)
    run_both(_filter_grad("NCHW"), [x3, f3, dy3])
    assert [name for name, _ in conv_builds] == ["conv3_wgrad"], conv_builds


def test_the_dwhalo_tuner_configs_fit():
    """Mentee's filter gradients each have several GPU configs within the H200's limits, with at most 72
    accumulators and 64-256 work-items each, 2 or more rows a stage, and no more work-items than a stage has
    inputs to stage (configs that broke either rule summed wrong on PoCL)."""
    from tfplus.kernels.opencl import conv
    for cin, cout, hw in [(32, 32, 32), (32, 64, 16), (64, 64, 16), (64, 128, 8)]:
        ok = [c for c in conv._dwhalo_candidates(cin, cout) if conv._dwhalo_fits(c, hw, 1024, 49152, 4)]
        assert len(ok) >= 5, (cin, cout, ok)
        for tci, tco, sr, wi, wo in ok:
            assert 9 * wi * wo <= 72 and 64 <= tci // wi * (tco // wo) <= 256 and tci <= cin and tco <= cout
            assert sr >= 2 and not conv._dwhalo_fits((tci, tco, 1, wi, wo), hw, 1024, 49152, 4)
    # a work-group of more work-items than a stage stages inputs (8 channels x 4 rows x 4 columns: 128) does not fit
    assert conv._dwhalo_fits((8, 32, 2, 1, 4), 4, 1024, 49152, 4)
    assert not conv._dwhalo_fits((8, 128, 2, 1, 4), 4, 1024, 49152, 4)
