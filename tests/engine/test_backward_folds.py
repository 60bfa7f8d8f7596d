"""The backward folds of issue 37 (tfplus.engine.rewrite `folds`): _FusedConv2DBackpropInputReluGrad,
_FusedMaxPoolGradReluGrad and _FusedConv2DBackpropFilterBiasAddGrad. Each fused op equals the chain of ops it
replaces, on the cpu (its NumPy kernels are that chain) and on opencl (one launch: the ReLU mask in conv.cl's dx
epilogue or nn.cl's pool gradient, the bias gradient a row of ones in the filter gradient's GEMM), in both layouts,
float32 and float64, under the 3x3 variants and the general kernels, split sums finished in the kernel or by a
pass; the rewrite makes them where the Mentee step has them, and a whole step with them trains as one without.
No new math: the fused ops are declared not differentiable and stand for ops whose gradients are checked already
(tests/ops)."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import needs_opencl
from opencl_compare import run_both

import tfplus as tf
from tfplus.engine.rewrite import FOLDS as KINDS
from tfplus.engine.rewrite import backward_folds, optimize
from tfplus.framework import apply_op

FOLDS = ("_FusedConv2DBackpropInputReluGrad", "_FusedMaxPoolGradReluGrad", "_FusedConv2DBackpropFilterBiasAddGrad")
CONV3 = "fwd3x3,dx3x3,dw3x3"


def _layer_grads(x, f, dy, fmt, pool: bool, window=2, stride=2, padding="VALID"):
    """The unfused chain and the fused ops over one layer: features r = relu(x) (a pool after it with `pool`),
    its conv's gradients for dy, and the input gradient masked by Relu6's gradient at x. Returns [unfused...,
    fused...] in matching order."""
    attrs = {"T": x.dtype, "strides": [1, 1, 1, 1], "padding": "SAME", "data_format": fmt,
             "dilations": [1, 1, 1, 1]}
    r = tf.nn.relu(x)
    sizes = tf.shape(r)
    fsizes = tf.constant(list(f.shape.as_list()), tf.int32)
    dx = apply_op("Conv2DBackpropInput", [sizes, f, dy], attrs)
    unfused = [apply_op("ReluGrad", [dx, r], {"T": x.dtype}), apply_op("Relu6Grad", [dx, x * 4], {"T": x.dtype}),
               apply_op("Conv2DBackpropFilter", [r, fsizes, dy], attrs),
               apply_op("BiasAddGrad", [dy], {"T": x.dtype, "data_format": fmt})]
    fused = [apply_op("_FusedConv2DBackpropInputReluGrad", [sizes, f, dy, r], {**attrs, "activation": "Relu"},
                      "dx_relu"),
             apply_op("_FusedConv2DBackpropInputReluGrad", [sizes, f, dy, x * 4], {**attrs, "activation": "Relu6"},
                      "dx_relu6"),
             *apply_op("_FusedConv2DBackpropFilterBiasAddGrad", [r, fsizes, dy], attrs, "dw_bias")]
    if pool:
        ksize = [1, 1, window, window] if fmt == "NCHW" else [1, window, window, 1]
        strides = [1, 1, stride, stride] if fmt == "NCHW" else [1, stride, stride, 1]
        pattrs = {"T": x.dtype, "ksize": ksize, "strides": strides, "padding": padding, "data_format": fmt}
        p = tf.nn.max_pool(r, ksize, strides, padding, data_format=fmt)
        g = p * 1.5 - 0.25  # a gradient of p's shape, some of it negative
        unfused.append(apply_op("ReluGrad", [apply_op("MaxPoolGrad", [r, p, g], pattrs), r], {"T": x.dtype}))
        fused.append(apply_op("_FusedMaxPoolGradReluGrad", [r, p, g], pattrs, "pool_relu"))
    return unfused + fused


def _arrays(rng, dtype, fmt, n=3, h=6, w=8, cin=16, cout=32):
    x = rng.standard_normal((n, cin, h, w) if fmt == "NCHW" else (n, h, w, cin)).astype(dtype)
    f = rng.standard_normal((3, 3, cin, cout)).astype(dtype)
    dy = rng.standard_normal((n, cout, h, w) if fmt == "NCHW" else (n, h, w, cout)).astype(dtype)
    return x, f, dy


def _check(outs):
    half = len(outs) // 2
    for a, b in zip(outs[half:], outs[:half]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(b).max())))


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_ops_equal_their_chains_on_the_cpu(fmt, dtype):
    x, f, dy = _arrays(np.random.default_rng(1), dtype, fmt)
    g = tf.Graph()
    with g.as_default():
        phs = [tf.placeholder(tf.as_dtype(dtype), a.shape) for a in (x, f, dy)]
        outs = _layer_grads(*phs, fmt, pool=True)
    with tf.Session(graph=g, config={"graph_options": {"rewrite_options": {"remapping": 2}}}) as s:
        got = s.run(outs, dict(zip(phs, (x, f, dy))))
    half = len(got) // 2
    for a, b in zip(got[half:], got[:half]):  # the cpu kernels are the chain: bit for bit
        np.testing.assert_array_equal(a, b)
    assert np.count_nonzero(got[0]) < got[0].size  # the mask did something


@needs_opencl
@pytest.mark.parametrize("fmt,variants,dtype", [
    ("NCHW", "none", np.float32), ("NHWC", "none", np.float32), ("NCHW", "none", np.float64),
    ("NCHW", CONV3, np.float32), ("NCHW", CONV3 + ",vtile", np.float64), ("NHWC", CONV3, np.float32)])
def test_fused_ops_match_numpy_and_their_chains_on_opencl(monkeypatch, fmt, variants, dtype):
    """Each fused op against the NumPy kernels (run_both) and against the unfused chain on opencl."""
    monkeypatch.setenv("TFPLUS_CONV_VARIANTS", variants)
    x, f, dy = _arrays(np.random.default_rng(2), dtype, fmt)
    got = run_both(lambda x, f, dy: _layer_grads(x, f, dy, fmt, pool=True), [x, f, dy])
    _check(got)


@needs_opencl
def test_other_pools_fold_too():
    """A 3x3 window of stride 2, SAME: nn.cl's general max_pool_grad with the mask."""
    x, f, dy = _arrays(np.random.default_rng(4), np.float32, "NCHW", h=7, w=9)
    _check(run_both(lambda x, f, dy: _layer_grads(x, f, dy, "NCHW", True, 3, 2, "SAME"), [x, f, dy]))


@needs_opencl
@pytest.mark.parametrize("finish", [True, False])
@pytest.mark.parametrize("variants", ["none", CONV3 + ",vtile"])
def test_the_bias_row_under_split_sums(monkeypatch, finish, variants):
    """A device made to look wide splits the filter gradient's sum: the last split of a tile writes dw and db, or
    (a device whose kernels cannot finish their sums) a pass sums the layers and dw and db are copied out."""
    from tfplus.kernels.opencl import conv
    wsplit = conv._wgrad_splits
    monkeypatch.setattr(conv, "_wgrad_splits", lambda m, n, p, cu, d=1: wsplit(m, n, p, 48, d))
    if not finish:
        monkeypatch.setattr(conv, "finishes", lambda rt, splits, cfg, most=0: False)
    monkeypatch.setenv("TFPLUS_CONV_VARIANTS", variants)
    seen = []
    run = conv._run_wgrad
    monkeypatch.setattr(conv, "_run_wgrad", lambda rt, plan, *a: seen.append(plan[5:]) or run(rt, plan, *a))
    x, f, dy = _arrays(np.random.default_rng(3), np.float32, "NCHW", n=2, h=16, w=16, cin=16, cout=48)
    _check(run_both(lambda x, f, dy: _layer_grads(x, f, dy, "NCHW", pool=False), [x, f, dy]))
    assert seen and all(splits > 1 and done == finish for splits, done in seen), seen


@needs_opencl
@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("variants", ["none", CONV3 + ",vtile"])
def test_the_bias_row_alone_in_its_tile_row(monkeypatch, split, variants):
    """32 input channels: 288 filter rows fill PoCL's 32-row tiles, so the ones row has a tile row of its own,
    whose groups add dy up instead of multiplying (conv.cl WGRAD_ONES_TILE); with split sums too."""
    from tfplus.kernels.opencl import _tune, conv
    assert (9 * 32) % _tune.CPU_TILE[0] == 0
    if split:
        wsplit = conv._wgrad_splits
        monkeypatch.setattr(conv, "_wgrad_splits", lambda m, n, p, cu, d=1: wsplit(m, n, p, 48, d))
    monkeypatch.setenv("TFPLUS_CONV_VARIANTS", variants)
    x, f, dy = _arrays(np.random.default_rng(5), np.float32, "NCHW", n=2, h=8, w=8, cin=32, cout=48)
    _check(run_both(lambda x, f, dy: _layer_grads(x, f, dy, "NCHW", pool=False), [x, f, dy]))


def _mentee(batch=4):
    from tfplus.graphs.mentee import training_graph
    tg = training_graph(total_steps=10, seed=0, image_shape=(3, 8, 8),
                        model_kwargs={"conv_widths": (16,) * 5, "fc_widths": (16,)})
    rng = np.random.default_rng(10)
    feed = {tg.images: rng.standard_normal((batch, 3, 8, 8)).astype(np.float32),
            tg.labels: rng.integers(0, 10, batch).astype(np.int32)}
    return tg, feed


def test_the_rewrite_folds_every_conv_layer_of_a_mentee_step():
    """Pools after conv 2, 4 and 5 (their ReLU gradients fold into MaxPoolGrad), conv 1 and 3 before a conv (into
    its input gradient), every bias gradient into its filter gradient; the dense layers keep
    _FusedReluGradBiasAddGrad. Without `folds`, none."""
    tg, _ = _mentee()
    fetches = [tg.train_op, tg.loss]
    feeds = {tg.images, tg.labels}
    on, off = optimize(tg.graph, fetches, feeds, set(KINDS)), optimize(tg.graph, fetches, feeds)
    assert {k: on.fused.get(k) for k in FOLDS} == {"_FusedConv2DBackpropInputReluGrad": 2,
                                                  "_FusedMaxPoolGradReluGrad": 3,
                                                  "_FusedConv2DBackpropFilterBiasAddGrad": 5}
    assert on.fused["_FusedReluGradBiasAddGrad"] == 1 and off.fused["_FusedReluGradBiasAddGrad"] == 6
    assert not set(FOLDS) & set(off.fused)
    left = [op.type for op in on.graph.get_operations()]
    assert not {"ReluGrad", "MaxPoolGrad", "Conv2DBackpropFilter"} & set(left), left
    assert left.count("BiasAddGrad") == 1  # the logits layer's: no ReLU, no filter gradient


@pytest.mark.parametrize("device,variants", [("cpu", "none"), pytest.param("opencl", "none", marks=needs_opencl),
                                              pytest.param("opencl", CONV3 + ",vtile", marks=needs_opencl)])
def test_a_mentee_step_with_the_folds_trains_as_one_without(monkeypatch, device, variants):
    """Three momentum steps of a narrow Mentee, folds off and on (TFPLUS_BACKWARD_FOLDS): the same losses and
    weights (the same sums in the same order, float32 rounding apart)."""
    monkeypatch.setenv("TFPLUS_CONV_VARIANTS", variants)
    tg, feed = _mentee()
    weights = list(tg.graph.get_collection("trainable_variables"))

    def train(folds):
        monkeypatch.setenv("TFPLUS_BACKWARD_FOLDS", folds)
        with tf.Session(graph=tg.graph, device=device) as s:
            s.run(tg.init_op)
            losses = [s.run([tg.train_op, tg.loss], feed)[1] for _ in range(3)]
            return losses, s.run(weights)
    (plain, w0), (folded, w1) = train("0"), train("1")
    np.testing.assert_allclose(folded, plain, rtol=1e-5)
    for a, b, v in zip(w1, w0, weights):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6, err_msg=v.name)
    assert plain[2] != plain[0]


@pytest.mark.parametrize("device", ["cpu", pytest.param("opencl", marks=needs_opencl)])
def test_a_budgeted_step_runs_the_folds_when_asked(monkeypatch, device):
    """TFPLUS_BACKWARD_FOLDS=1 under a memory budget: the planned step (every kernel's scratch from the fused ops'
    declarations, which the planned executor checks) gives the losses of the unbudgeted step without them."""
    tg, feed = _mentee()

    def losses(folds, budget):
        monkeypatch.setenv("TFPLUS_BACKWARD_FOLDS", folds)
        with tf.Session(graph=tg.graph, device=device, memory_budget=budget) as s:
            s.run(tg.init_op)
            return [s.run([tg.train_op, tg.loss], feed)[1] for _ in range(2)]
    np.testing.assert_allclose(losses("1", "1GB"), losses("0", None), rtol=1e-5)


def test_the_folds_are_on_for_an_unbudgeted_gpu_step_and_the_switch_overrides(monkeypatch):
    """Unset: the ReLU folds (not the bias row) on a GPU without a budget; the switch picks any."""
    monkeypatch.delenv("TFPLUS_BACKWARD_FOLDS", raising=False)
    gpu, cpu = {"type": "GPU"}, {"type": "CPU"}
    assert backward_folds(gpu, None) == {"dx", "pool"}
    assert not backward_folds(gpu, 1 << 30) and not backward_folds(cpu, None) and not backward_folds({}, None)
    monkeypatch.setenv("TFPLUS_BACKWARD_FOLDS", "0")
    assert not backward_folds(gpu, None)
    monkeypatch.setenv("TFPLUS_BACKWARD_FOLDS", "1")
    assert backward_folds(cpu, 1 << 30) == set(KINDS)
    monkeypatch.setenv("TFPLUS_BACKWARD_FOLDS", "dx, pool")
    assert backward_folds(gpu, None) == {"dx", "pool"}
    monkeypatch.setenv("TFPLUS_BACKWARD_FOLDS", "yes")
    with pytest.raises(ValueError, match="TFPLUS_BACKWARD_FOLDS"):
        backward_folds(gpu, None)


def test_each_fold_alone():
    """A list of folds makes those only: without `bias` the conv layers' BiasAddGrads stay (each alone, its
    ReluGrad folded), without `dx` the layers before a conv keep _FusedReluGradBiasAddGrad."""
    tg, _ = _mentee()
    fetches, feeds = [tg.train_op, tg.loss], {tg.images, tg.labels}
    no_bias = optimize(tg.graph, fetches, feeds, {"dx", "pool"}).fused
    assert no_bias["_FusedConv2DBackpropInputReluGrad"] == 2 and no_bias["_FusedMaxPoolGradReluGrad"] == 3
    assert "_FusedConv2DBackpropFilterBiasAddGrad" not in no_bias and no_bias["_FusedReluGradBiasAddGrad"] == 1
    pool = optimize(tg.graph, fetches, feeds, {"pool"}).fused
    assert pool["_FusedMaxPoolGradReluGrad"] == 3 and pool["_FusedReluGradBiasAddGrad"] == 3
    assert not {"_FusedConv2DBackpropInputReluGrad", "_FusedConv2DBackpropFilterBiasAddGrad"} & set(pool)


def test_the_fused_ops_shapes_and_their_errors():
    """Shapes as the ops they replace; features of another shape than the gradient are refused, naming both."""
    g = tf.Graph()
    with g.as_default():
        f = tf.placeholder(tf.float32, [3, 3, 16, 32])
        dy = tf.placeholder(tf.float32, [None, 32, 6, 8])
        x = tf.placeholder(tf.float32, [None, 16, 6, 8])
        attrs = {"T": tf.float32, "strides": [1, 1, 1, 1], "padding": "SAME", "data_format": "NCHW",
                 "dilations": [1, 1, 1, 1]}
        sizes = tf.shape(x)
        dx = apply_op("_FusedConv2DBackpropInputReluGrad", [sizes, f, dy, x], {**attrs, "activation": "Relu"}, "dx")
        dw, db = apply_op("_FusedConv2DBackpropFilterBiasAddGrad", [x, tf.constant([3, 3, 16, 32]), dy], attrs, "dw")
        assert dx.shape.as_list() == [None, 16, 6, 8]
        assert dw.shape.as_list() == [3, 3, 16, 32] and db.shape.as_list() == [32]
        with pytest.raises(ValueError, match="features"):
            apply_op("_FusedConv2DBackpropInputReluGrad", [sizes, f, dy, tf.placeholder(tf.float32, [2, 16, 6])],
                     {**attrs, "activation": "Relu"}, "bad")
        with pytest.raises(ValueError, match="activation"):
            apply_op("_FusedConv2DBackpropInputReluGrad", [sizes, f, dy, x], {**attrs, "activation": "Tanh"}, "bad")


def test_tfplus_train_refuses_a_bad_folds_setting_as_an_error_not_a_bug(monkeypatch, capsys, tmp_path):
    """A user's TFPLUS_BACKWARD_FOLDS typo ends `tfplus train` with one line naming the variable and its values."""
    from tfplus.cli import main
    monkeypatch.setenv("TFPLUS_BACKWARD_FOLDS", "yes")
    rc = main(["train", "--synthetic", "--steps", "1", "--no-eval", "--batch-size", "8",
               "--checkpoint-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc != 0 and "internal error" not in err
    assert "TFPLUS_BACKWARD_FOLDS='yes': give 0 (none), 1 (all)" in err
