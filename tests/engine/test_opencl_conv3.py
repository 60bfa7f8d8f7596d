"""The 3x3 stride-1 SAME convolution variants (kernels/opencl/conv.py TFPLUS_CONV_VARIANTS: conv.cl's conv3 and
conv3_wgrad, with and without gemm.cl's vector register tiles) against the NumPy kernels: forward (plain and with
the fused bias and ReLU), input and filter gradients, both layouts, split sums finished in the kernel or by a
pass, and the shapes the variants leave to the general kernels; which variants a device runs by default, and the
tiles a GPU takes for them without tuning. float64 agrees to 1e-12, float32 as test_opencl.py's GEMM-based
kernels."""
from __future__ import annotations

import contextlib
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import needs_opencl
from opencl_compare import conv_layer, run_both, run_conv_shapes

import tfplus as tf

pytestmark = needs_opencl

ALL = "fwd3x3,dx3x3,dw3x3"


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


# The tile forms in float32 NCHW (Mentee's), the other layout and float64 under some (each case builds its own
# programs: the channels are compile-time; test_vector_tiles_of_several_runs has vtile alone).
@pytest.mark.parametrize("fmt,variants,dtype", [
    ("NCHW", ALL, np.float32), ("NCHW", ALL + ",vtile", np.float32), ("NHWC", ALL, np.float32),
    ("NCHW", ALL + ",vtile", np.float64)])
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
        run_both(lambda x, f, b, dy: conv_layer(x, f, b, dy, fmt), [x, f, b, dy])
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
    run_both(lambda x, f, b, dy: conv_layer(x, f, b, dy, "NCHW"), [x, f, b, dy])
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
    monkeypatch.setenv("TFPLUS_CONV_VARIANTS", ALL + ",vtile")
    splits, finished = [], []
    run, wrun = conv._run_conv, conv._run_wgrad
    monkeypatch.setattr(conv, "_run_conv", lambda rt, plan, *a: splits.append(plan[5]) or run(rt, plan, *a))
    monkeypatch.setattr(conv, "_run_wgrad", lambda rt, plan, *a: finished.append(plan[6]) or wrun(rt, plan, *a))
    rng, dtype = np.random.default_rng(7), np.float32
    x, f = rng.standard_normal((2, 64, 16, 16)).astype(dtype), rng.standard_normal((3, 3, 64, 48)).astype(dtype)
    b, dy = rng.standard_normal(48).astype(dtype), rng.standard_normal((2, 48, 16, 16)).astype(dtype)
    run_both(lambda x, f, b, dy: conv_layer(x, f, b, dy, "NCHW"), [x, f, b, dy])
    assert "conv3" in built and "conv3_wgrad" in built and max(splits) > 1, (built, splits)
    assert finished and all(done == finish for done in finished), finished
    if not finish:
        monkeypatch.setenv("TFPLUS_CONV_VARIANTS", ALL + ",dwfinish")
        finished.clear()
        run_both(lambda x, f, b, dy: conv_layer(x, f, b, dy, "NCHW"), [x, f, b, dy])
        assert finished and all(finished), finished


def test_shapes_the_variants_do_not_cover_keep_the_general_kernels(monkeypatch, built):
    """A stride, VALID padding, a 5x5 filter or channels conv3 cannot slice (not a multiple of 16) run the general
    kernels under every variant; a strided filter gradient too."""
    monkeypatch.setenv("TFPLUS_CONV_VARIANTS", ALL + ",vtile")
    rng = np.random.default_rng(8)
    run_conv_shapes(rng, [(16, 3, 2, "SAME"), (16, 3, 1, "VALID"), (16, 5, 1, "SAME"), (12, 3, 1, "SAME")])
    # 12 channels: the forward and input gradient (16 output channels: 8) keep conv; the filter gradient of a
    # stride-1 SAME 3x3 conv takes conv3_wgrad whatever its channels.
    assert "conv3" not in built and "conv" in built and "conv_wgrad" in built and "conv3_wgrad" in built, built


def _fake_gpu(tuning=None):
    """The tuner's view of a GPU (no device behind it): what _tune.choose and conv.variants read."""
    dev = SimpleNamespace(is_gpu=True, tuning=dict(tuning or {}), max_wg=1024, tune_seconds=0.0,
                          save_tuning=lambda: None, programs_of=lambda run, cfg: [], prebuild=lambda keys: 0)
    return SimpleNamespace(dev=dev, info={"local_mem_bytes": 49152}, synchronize=lambda: None,
                           describe=lambda: "a GPU", timing=lambda: contextlib.nullcontext([]))


def test_the_tuner_tries_the_tiles_vtile_can_build(monkeypatch):
    """On a GPU vtile tunes over tiles whose threads own runs of 4 rows and columns."""
    from tfplus.kernels.opencl import _tune, conv
    monkeypatch.setenv("TFPLUS_OPENCL_TUNE_S", "inf")
    defines, candidates, tag = conv._tiles({"vtile"})
    tried: list = []
    _tune.choose(_fake_gpu(), "conv3_fwdv|float32|00|9x9x9", 4, tried.append, candidates, nearest=True)
    assert defines == {"VTILE": 1} and tag == "v" and tried and set(tried) <= set(candidates)
    assert all(c[3] % 4 == 0 and c[4] % 4 == 0 for c in tried)
    assert conv._tiles({"fwd3x3"}) == ({}, None, "")


@pytest.mark.parametrize("budget", ["1", "inf"])
@pytest.mark.parametrize("key", ["conv3_wgrad|float32|00|32x27x0", "gemm|float32|00|0x9x9"])
def test_an_empty_problem_takes_the_default_tile_untuned(monkeypatch, key, budget):
    """An empty batch's filter gradient (K = 0 images' pixels) on a GPU: found on the H200, where the nearest tuned
    problem's log size ratio raised a math domain error."""
    from tfplus.kernels.opencl import _tune
    monkeypatch.setenv("TFPLUS_OPENCL_TUNE_S", budget)
    gpu, tried = _fake_gpu({"conv3_wgrad|float32|00|32x27x4096|": list(_tune.GPU_DEFAULT)}), []
    assert _tune.choose(gpu, key, 4, tried.append, nearest=True) == _tune.GPU_DEFAULT
    assert not tried and len(gpu.dev.tuning) == 1


def test_a_gpu_runs_the_3x3_variants_by_default_and_the_switch_overrides(monkeypatch):
    """Unset, TFPLUS_CONV_VARIANTS means the device's default: fwd3x3, dx3x3, dw3x3, vtile, halo, halokg on a GPU, the
    general kernels on a CPU device; `none` or an empty value turns them off on a GPU too; a list is taken as is."""
    from tfplus.kernels.opencl import conv
    gpu, cpu = _fake_gpu(), SimpleNamespace(dev=SimpleNamespace(is_gpu=False))
    monkeypatch.delenv("TFPLUS_CONV_VARIANTS", raising=False)
    assert conv.variants(gpu) == {"fwd3x3", "dx3x3", "dw3x3", "vtile", "halo", "halokg"}
    assert conv.variants(cpu) == frozenset()
    for off in ("none", "", " none "):
        monkeypatch.setenv("TFPLUS_CONV_VARIANTS", off)
        assert conv.variants(gpu) == frozenset(), off
    monkeypatch.setenv("TFPLUS_CONV_VARIANTS", "fwd3x3,dx3x3,dw3x3,vtile,dwfinish")
    assert conv.variants(cpu) == conv.variants(gpu) == {"fwd3x3", "dx3x3", "dw3x3", "vtile", "dwfinish"}


@pytest.mark.parametrize("gpu", [False, True])
def test_the_default_kernels_of_each_device_kind(monkeypatch, built, gpu):
    """TFPLUS_CONV_VARIANTS unset: PoCL (a CPU device) runs the general kernels; the same device taken for a GPU
    (its default configs, tuning off) runs conv3_halo and conv3_wgrad with vector tiles. Both match NumPy."""
    from tfplus.kernels.opencl import conv
    from tfplus.runtime import opencl
    monkeypatch.delenv("TFPLUS_CONV_VARIANTS", raising=False)
    monkeypatch.setenv("TFPLUS_OPENCL_TUNE", "0")
    monkeypatch.setattr(opencl.OpenCLRuntime().dev, "is_gpu", gpu)
    tiles: list = []
    make = conv.kernel
    monkeypatch.setattr(conv, "kernel", lambda rt, src, base, *a, **k: tiles.append(k.get("VTILE")) or
                        make(rt, src, base, *a, **k))
    rng = np.random.default_rng(11)
    x, f = rng.standard_normal((2, 16, 5, 6)).astype(np.float32), rng.standard_normal((3, 3, 16, 16)).astype(np.float32)
    b, dy = rng.standard_normal(16).astype(np.float32), rng.standard_normal((2, 16, 5, 6)).astype(np.float32)
    run_both(lambda x, f, b, dy: conv_layer(x, f, b, dy, "NCHW"), [x, f, b, dy])
    three = {"conv3_halo", "conv3_halo+epilogue", "conv3_wgrad"}
    general = {"conv", "conv+epilogue", "conv_wgrad"}
    assert (three <= set(built) and not (general | {"conv3"}) & set(built)) if gpu else \
        (general <= set(built) and not three & set(built)), built
    assert set(tiles) == ({1, None} if gpu else {None}), tiles


def test_the_shipped_tiles_serve_the_3x3_kernels_untuned(monkeypatch, built):
    """The tuning keys the conv3 launchers ask for (recorded from a run) find tiles in tuning-gpu.json on a fresh
    H200 and on an H100 (borrowed) at TFPLUS_OPENCL_TUNE_S=1, nothing timed; Mentee's micro-batches (64, 32 images:
    not tuned) take the tile of the same layer at 128; with TFPLUS_OPENCL_TUNE_S=inf a problem is tuned."""
    from tfplus.kernels.opencl import _tune, conv
    from tfplus.runtime.opencl import shipped_tuning
    vtile = conv.VTILE_CANDIDATES
    keys: list = []
    choose = _tune.choose
    monkeypatch.setattr(_tune, "choose", lambda rt, key, *a, **k: keys.append((key, k.get("nearest"))) or
                        choose(rt, key, *a, **k))
    monkeypatch.setenv("TFPLUS_CONV_VARIANTS", ALL + ",vtile")
    rng = np.random.default_rng(12)
    x, f = rng.standard_normal((2, 32, 4, 4)).astype(np.float32), rng.standard_normal((3, 3, 32, 64)).astype(np.float32)
    b, dy = rng.standard_normal(64).astype(np.float32), rng.standard_normal((2, 64, 4, 4)).astype(np.float32)
    run_both(lambda x, f, b, dy: conv_layer(x, f, b, dy, "NCHW"), [x, f, b, dy])
    three = [k for k, nearest in keys if k.startswith("conv3")]
    assert {k.split("|")[0] for k in three} == {"conv3_fwdv", "conv3_dxv", "conv3_dwv"} and all(
        nearest for k, nearest in keys if k.startswith("conv3")), keys
    monkeypatch.setenv("TFPLUS_OPENCL_TUNE_S", "1")
    monkeypatch.delenv("TFPLUS_OPENCL_BUILD_OPTIONS", raising=False)  # the shipped tiles are for none
    h200, name = shipped_tuning("NVIDIA H200")
    assert name == "NVIDIA H200" and "conv_fwd|float32|000|32x131072x27|" in h200  # the H100's, per key
    for table in (h200, shipped_tuning("NVIDIA H100 80GB HBM3")[0]):
        rt = _fake_gpu(table)
        for key in three:
            tried: list = []
            tile = _tune.choose(rt, key, 4, tried.append, vtile, nearest=True)
            assert not tried and rt.dev.tune_seconds == 0 and tile in vtile, key
        # conv4's forward, conv5's input gradient, conv2's filter gradient at 128 images, then at 64 (that layer's
        # tile) and 32 (the nearest GEMM of the kernel's, maybe another layer's)
        for layer, n in [("conv3_fwdv|float32|00|64x{}x576", 32768), ("conv3_dxv|float32|10|64x{}x1152", 8192),
                         ("conv3_dwv|float32|288x32x{}", 131072)]:
            shipped = {tuple(v) for k, v in table.items() if k.startswith(layer.split("|")[0] + "|")}
            for micro, want in [(n // 2, {tuple(table[layer.format(n) + "|"])}), (n // 4, shipped)]:
                own = table.get(layer.format(micro) + "|")  # a micro-batch's own tile, where one is shipped
                tried = []
                assert _tune.choose(rt, layer.format(micro), 4, tried.append, vtile, nearest=True) in (
                    {tuple(own)} if own else want), layer
                assert not tried and (own or layer.format(micro) + "|" not in rt.dev.tuning)
    monkeypatch.setenv("TFPLUS_OPENCL_TUNE_S", "inf")
    tried = []
    _tune.choose(_fake_gpu(h200), "conv3_fwdv|float32|00|64x4096x576", 4, tried.append, vtile, nearest=True)
    assert tried


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
    (plain, w0), (varied, w1) = train("none"), train(ALL + ",vtile")
    np.testing.assert_allclose(varied, plain, rtol=1e-5)
    for a, b, v in zip(w1, w0, weights):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6, err_msg=v.name)
    assert plain[2] != plain[0] and {"conv3", "conv3_wgrad"} <= set(built), built
