"""conv.cl's conv3_halo with channel groups (kernels/opencl/conv.py's `halokg` variant, issue 37 stop 46): KG groups
of work-items share a work-group's outputs, each summing every KG-th channel of a stage, their sums added in local
memory (more work-items for a micro-batch's few output tiles, no scratch). Forward (plain, with the fused bias and
ReLU), input gradient and its ReLU / Relu6 folds against the NumPy kernels, both layouts, float32 and float64, shapes
no tile divides; GPU configs of 4 groups at Mentee's micro-batches; the configs within an H200's limits."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import needs_opencl
from opencl_compare import conv3_arrays, conv_layer, run_both

import tfplus as tf
from tfplus.framework import apply_op

pytestmark = needs_opencl

HALOKG = "fwd3x3,dx3x3,dw3x3,vtile,halo,halokg"


def _groups(conv_builds) -> set:
    return {(d["FLIP"], d.get("KG", 1)) for name, d in conv_builds if name == "conv3_halo"}


# (n, h, w, cin, cout): a partial strip of rows and a padded row width, channels no stage of 16 divides (24, 40:
# stages of 8), a 1 x 1 image.
SHAPES = [(3, 7, 9, 16, 32), (2, 5, 12, 24, 40), (2, 1, 1, 16, 16)]


@pytest.mark.parametrize("fmt,dtype,tile,kg", [
    ("NCHW", np.float32, None, None), ("NCHW", np.float32, (16, 4, 16, 4, 4), 4), ("NHWC", np.float32, None, None),
    ("NCHW", np.float64, None, None)])
def test_halokg_matches_numpy(monkeypatch, conv_builds, fmt, dtype, tile, kg):
    """PoCL's tile in 2 channel groups, or 4 groups of 16 channels x 4 rows (4 channels of a 16-channel stage each;
    of 8-channel stages where 16 do not divide the channels: 2 each)."""
    from tfplus.kernels.opencl import conv
    if tile:
        monkeypatch.setattr(conv, "HALO_CPU_TILE", tile)
        monkeypatch.setattr(conv, "HALOKG_CPU", kg)
    monkeypatch.setenv("TFPLUS_CONV_VARIANTS", HALOKG)
    rng = np.random.default_rng(len(fmt) + (kg or 0))
    for shape in SHAPES:
        run_both(lambda x, f, b, dy: conv_layer(x, f, b, dy, fmt), list(conv3_arrays(rng, dtype, fmt, *shape)))
    assert _groups(conv_builds) == {(0, kg or conv.HALOKG_CPU), (1, kg or conv.HALOKG_CPU)}, conv_builds


def test_halokg_input_gradient_with_the_relu_masks(monkeypatch, conv_builds):
    """_FusedConv2DBackpropInputReluGrad on conv3_halo in channel groups: the mask applied as group 0 writes the
    groups' sum equals ReluGrad / Relu6Grad after the input gradient, bit for bit."""
    monkeypatch.setenv("TFPLUS_CONV_VARIANTS", HALOKG)
    rng = np.random.default_rng(5)
    x, f, _, dy = conv3_arrays(rng, np.float32, "NCHW", 2, 6, 8, 16, 32)

    def grads(x, f, dy):
        attrs = {"T": x.dtype, "strides": [1, 1, 1, 1], "padding": "SAME", "data_format": "NCHW",
                 "dilations": [1, 1, 1, 1]}
        r, sizes = tf.nn.relu(x), tf.shape(x)
        dx = apply_op("Conv2DBackpropInput", [sizes, f, dy], attrs)
        return [apply_op("ReluGrad", [dx, r], {"T": x.dtype}), apply_op("Relu6Grad", [dx, x * 4], {"T": x.dtype}),
                apply_op("_FusedConv2DBackpropInputReluGrad", [sizes, f, dy, r], {**attrs, "activation": "Relu"},
                         "dx_relu"),
                apply_op("_FusedConv2DBackpropInputReluGrad", [sizes, f, dy, x * 4],
                         {**attrs, "activation": "Relu6"}, "dx_relu6")]
    got = run_both(grads, [x, f, dy])
    np.testing.assert_array_equal(got[2], got[0])
    np.testing.assert_array_equal(got[3], got[1])
    assert {(d.get("EPILOGUE", 0), d.get("KG")) for name, d in conv_builds if name == "conv3_halo"} == \
        {(0, 2), (3, 2), (4, 2)}, conv_builds


@pytest.mark.parametrize("n", [32, 64])
def test_mentee_micro_batches_on_gpu_configs_of_four_groups(monkeypatch, conv_builds, n):
    """Mentee's conv5 width (8 x 8; channels narrowed) at the micro-batches on the PoCL device taken for a GPU, each
    pass on the first GPU config of 4 channel groups that fits it (4 x 4 or 4 x 8 outputs a work-item)."""
    from tfplus.kernels.opencl import conv
    from tfplus.runtime import opencl
    monkeypatch.setenv("TFPLUS_CONV_VARIANTS", HALOKG)
    monkeypatch.setenv("TFPLUS_OPENCL_TUNE", "0")
    monkeypatch.setattr(opencl.OpenCLRuntime().dev, "is_gpu", True)
    monkeypatch.setattr(conv, "_halo_default", lambda candidates, m, iw: next(c for c in candidates if c[5] == 4))
    rng = np.random.default_rng(n)
    run_both(lambda *a: conv_layer(*a, "NCHW"), list(conv3_arrays(rng, np.float32, "NCHW", n, 8, 8, 32, 64)))
    got = {(d["FLIP"], d["KG"]) for name, d in conv_builds if name == "conv3_halo"}
    assert got == {(0, 4), (1, 4)}, conv_builds


def test_the_halokg_configs_fit_the_h200():
    """Each Mentee forward and input gradient has halo's configs (one group) and 15 or more of 2-4 groups within an
    H200's limits (1024 work-items, 48 KB of local memory), whose groups' sums fit the staged inputs' local memory."""
    from tfplus.kernels.opencl import conv
    for cin, cout, hw in [(32, 32, 32), (32, 64, 16), (64, 64, 16), (64, 128, 8)]:
        for m, summed in ((cout, cin), (cin, cout)):
            ok = [c for c in conv._halokg_candidates(m, hw, hw) if conv._halo_fits(c, summed, hw, 1024, 49152, 4)]
            halo = [c for c in conv._halo_candidates(m, hw, hw) if conv._halo_fits(c, summed, hw, 1024, 49152, 4)]
            assert {c[:5] for c in ok if c[5] == 1} == set(halo) and len([c for c in ok if c[5] > 1]) >= 15
            for tm, rows, cc, wm, wn, kg in ok:
                iwp = -(-hw // wn) * wn
                assert tm // wm * rows * iwp // wn * kg <= 512 and cc % kg == 0
                assert kg == 1 or tm * rows * iwp <= cc * (rows + 2) * (iwp + 8 if (iwp + 8) % 8 else iwp + 12)
