"""conv.cl's conv3_wgrad_tile (kernels/opencl/conv.py's `dwtile` variant, issue 37 stop 46): the 3x3 stride-1 SAME
filter gradient as a register-tiled GEMM over one staged input block per strip of rows, against the NumPy kernels.
Both layouts, float32 and float64, image sizes and channel counts no tile divides (partial strips, channels short
of a tile, an RGB layer's 3 input channels on a tile of 4, a 1 x 1 image), tiles of one and two vector runs a side
and of several position groups, split layers finished in the kernel or by a pass, the configs a GPU takes untuned at
Mentee's micro-batches, the bias fold it leaves to conv3_wgrad, and its split scratch within the declared one.
float64 agrees to 1e-12, float32 as test_opencl.py's GEMM-based kernels."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from conftest import needs_opencl
from opencl_compare import conv3_arrays, run_both

import tfplus as tf
from tfplus.framework import apply_op

pytestmark = needs_opencl

DWTILE = "fwd3x3,dx3x3,dw3x3,vtile,halo,dwtile"
# Mentee's layers: (in channels, out channels, height = width).
MENTEE = [(3, 32, 32), (32, 32, 32), (32, 64, 16), (64, 64, 16), (64, 128, 8)]


def _tiles(conv_builds) -> list:
    return [tuple(d[k] for k in ("TCI", "TCO", "SR", "WI", "WO", "PG")) for name, d in conv_builds
            if name == "conv3_wgrad_tile"]


def _arrays(rng, dtype, fmt, *shape):
    x, f, _, dy = conv3_arrays(rng, dtype, fmt, *shape)  # a filter gradient has no bias
    return x, f, dy


def _filter_grad(fmt):
    def build(x, f, dy):
        return tf.gradients(tf.nn.conv2d(x, f, strides=1, padding="SAME", data_format=fmt), [f], grad_ys=dy)
    return build


# (n, h, w, cin, cout): 7 rows of 9 columns (strips of 2 and 3 rows: a partial last one), 24 and 40 channels (no
# tile of 16 divides them), a 1 x 1 image (every tap but the centre reads the halo), Mentee's conv5 width, and an
# RGB layer (3 input channels: a tile of 4, its 4th channel zeros).
SHAPES = [(3, 7, 9, 16, 32), (2, 5, 12, 24, 40), (2, 1, 1, 16, 16), (2, 8, 8, 8, 32), (2, 6, 6, 3, 16)]


@pytest.mark.parametrize("fmt,dtype,tile", [
    ("NCHW", np.float32, None), ("NCHW", np.float32, (16, 32, 2, 8, 8, 1)), ("NCHW", np.float32, (8, 32, 3, 4, 8, 4)),
    ("NHWC", np.float32, None), ("NCHW", np.float64, None)])
def test_dwtile_matches_numpy(monkeypatch, conv_builds, fmt, dtype, tile):
    """PoCL's tile (8 x 16 channels, 4 x 4 a work-item, 2 rows a stage, 2 position groups), 8 x 8 channels a
    work-item in one group, and 4 x 8 in 4 groups over strips of 3 rows; the RGB layer takes 4 input channels a
    tile (4 a work-item) whatever the tile says."""
    from tfplus.kernels.opencl import conv
    if tile:
        monkeypatch.setattr(conv, "DWTILE_CPU_TILE", tile)
    monkeypatch.setenv("TFPLUS_CONV_VARIANTS", DWTILE)
    rng = np.random.default_rng(len(fmt) + (tile or (0, 0))[1])
    for shape in SHAPES:
        run_both(_filter_grad(fmt), list(_arrays(rng, dtype, fmt, *shape)))
    got = _tiles(conv_builds)
    assert len(got) == len(SHAPES) and not {"conv3_wgrad", "conv_wgrad"} & {n for n, _ in conv_builds}, conv_builds
    tci, tco, sr, wi, wo, pg = tile or conv.DWTILE_CPU_TILE
    want = [(min(tci, -(-cin // 4) * 4), tco, min(sr, h), min(wi, -(-cin // 4) * 4), wo, pg)
            for _, h, _, cin, _ in SHAPES]
    assert got == want and want[-1][0] == 4, got


def test_dwtile_split_layers(monkeypatch, conv_builds):
    """On a device made to look wide the strips split over work-group layers (8 images of 10 rows in strips of 3: 32
    strips, 4 a split; 4 one-row images in 4 splits), in the planner's declared layers, and the last work-group of
    each tile adds them up. Position groups with no positions (PG 4 over rows of 2) add zeros. A device whose
    kernels cannot finish split sums keeps conv3_wgrad."""
    from tfplus.kernels.opencl import conv
    splits: list = []
    dsplit = conv._dwtile_splits
    monkeypatch.setattr(conv, "_wgrad_splits", lambda m, n, p, cu, d=1: (64, -(-p // 64)))  # the declared layers
    monkeypatch.setattr(conv, "_dwtile_splits", lambda cfg, g, size, cu, d: splits.append(dsplit(cfg, g, size, 8, d))
                        or splits[-1])
    monkeypatch.setattr(conv, "DWTILE_CPU_TILE", (8, 32, 3, 4, 8, 4))
    monkeypatch.setenv("TFPLUS_CONV_VARIANTS", DWTILE)
    rng = np.random.default_rng(3)
    for shape in [(8, 10, 10, 16, 32), (4, 1, 2, 8, 32)]:
        run_both(_filter_grad("NCHW"), list(_arrays(rng, np.float32, "NCHW", *shape)))
    assert splits == [(8, 4), (4, 1)], splits
    assert len(_tiles(conv_builds)) == 2 and "conv3_wgrad" not in {n for n, _ in conv_builds}, conv_builds
    conv_builds.clear()
    monkeypatch.setattr(conv, "finishes_splits", lambda rt: False)
    run_both(_filter_grad("NCHW"), list(_arrays(rng, np.float32, "NCHW", 2, 6, 6, 16, 32)))
    assert [n for n, _ in conv_builds] == ["conv3_wgrad"], conv_builds


def test_dwtile_leaves_the_bias_fold_to_conv3_wgrad(monkeypatch, conv_builds):
    """_FusedConv2DBackpropFilterBiasAddGrad (the filter gradient with the bias gradient as a row of ones) keeps
    conv3_wgrad under dwtile."""
    monkeypatch.setenv("TFPLUS_CONV_VARIANTS", DWTILE)
    rng = np.random.default_rng(4)
    x, f, dy = _arrays(rng, np.float32, "NCHW", 2, 6, 6, 16, 32)

    def folded(x, f, dy):
        attrs = {"T": x.dtype, "strides": [1, 1, 1, 1], "padding": "SAME", "data_format": "NCHW",
                 "dilations": [1, 1, 1, 1]}
        return list(apply_op("_FusedConv2DBackpropFilterBiasAddGrad", [x, tf.constant([3, 3, 16, 32]), dy], attrs,
                             "dw_bias"))
    got = run_both(folded, [x, f, dy])
    np.testing.assert_allclose(got[1], dy.sum(axis=(0, 2, 3)), rtol=1e-4, atol=1e-3)
    assert [n for n, _ in conv_builds] == ["conv3_wgrad"], conv_builds


@pytest.fixture
def gpu_defaults(monkeypatch):
    """The PoCL device taken for a GPU that tunes nothing and finishes split sums (as NVIDIA's): each problem runs the
    config an untuned GPU takes."""
    from tfplus.kernels.opencl import conv
    from tfplus.runtime import opencl
    monkeypatch.setattr(conv, "finishes_splits", lambda rt: True)
    monkeypatch.setenv("TFPLUS_CONV_VARIANTS", DWTILE)
    monkeypatch.setenv("TFPLUS_OPENCL_TUNE", "0")
    monkeypatch.setattr(opencl.OpenCLRuntime().dev, "is_gpu", True)


@pytest.mark.parametrize("n", [32, 64])
def test_mentee_micro_batches_on_the_gpu_configs(conv_builds, gpu_defaults, n):
    """Mentee's conv5 width (8 x 8, narrowed channels) and its RGB layer (3 channels of 32 x 32, few images) at the
    micro-batches' sizes on the configs an untuned GPU takes: 8 x 8 channels a work-item where the channels allow,
    an RGB layer 4 x 4 or 4 x 8 on a tile of 4 input channels."""
    rng = np.random.default_rng(n)
    run_both(_filter_grad("NCHW"), list(_arrays(rng, np.float32, "NCHW", n, 8, 8, 32, 64)))
    run_both(_filter_grad("NCHW"), list(_arrays(rng, np.float32, "NCHW", 2, 32, 32, 3, 32)))
    got = _tiles(conv_builds)
    assert len(got) == 2 and got[0][3:5] == (8, 8) and got[1][0] == 4, got


def test_the_mentee_configs_fit_the_h200_and_the_declared_scratch():
    """Each Mentee filter gradient has several GPU configs within an H200's limits (1024 work-items, 48 KB of local
    memory); at every batch the training runs, each config's split layers fit DWTILE_SCRATCH_BYTES (whatever the
    compute units) and the planner's declared scratch (_wgrad_scratch), few enough for the kernel to finish them, and
    some config has work-groups enough for the H200's 132 compute units."""
    from tfplus.kernels.opencl import conv
    attrs = {"strides": [1, 1, 1, 1], "padding": "SAME", "data_format": "NCHW"}
    for cin, cout, hw in MENTEE:
        ok = [c for c in conv._dwtile_candidates(cin, cout, hw, hw) if conv._dwtile_fits(c, cin, hw, hw, 1024,
                                                                                          49152, 4)]
        assert len(ok) >= 8, (cin, cout, ok)
        for batch in (128, 64, 32):
            g = conv._Geom((batch, cin, hw, hw), (3, 3, cin, cout), attrs)
            x, sizes = SimpleNamespace(shape=g.nchw and (batch, cin, hw, hw), dtype=np.dtype(np.float32)), \
                SimpleNamespace(value=np.array([3, 3, cin, cout]))
            declared = conv._wgrad_scratch([x, sizes, None], attrs, 132)
            declared = declared[0][0][0] if declared else 1
            groups = []
            for cfg in ok:
                splits, per = conv._dwtile_splits(cfg, g, 4, 132, 1)
                assert splits * 9 * cin * cout * 4 <= conv.DWTILE_SCRATCH_BYTES and splits <= declared
                assert splits * cfg[3] * cfg[4] // cfg[5] <= conv.DWTILE_FINISH_LOADS  # the kernel finishes them
                assert splits * per >= batch * -(-hw // cfg[2]) > (splits - 1) * per  # every split has strips
                groups.append(-(-cin // cfg[0]) * -(-cout // cfg[1]) * splits)
            assert max(groups) >= 128, (cin, cout, batch, groups)
