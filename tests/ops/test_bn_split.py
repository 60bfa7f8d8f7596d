"""Batch norm in statistics passes in fused ops (ops/bn_split_ops.py): chained over one batch they are the
training-mode batch norm and its gradient (FusedBatchNormV3, its activation, FusedBatchNormGradV3) on every device,
in one or two launches each on opencl; and the statistics passes' runs compute a norm with them alone. Each op
against the primitive ops it stands for: tests/cases_bn_split.py (the op table)."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import needs_opencl

import tfplus as tf
from tfplus import planner
from tfplus.ops import bn_split_ops

EPS = 1e-3
SPLIT_OPS = {"_BatchNormMoments", "_BatchNormFromMoments", "_BatchNormApply", "_BatchNormGradSums",
             "_BatchNormGradApply"}


def _chain(fmt: str, activation: str, shape):
    """Placeholders (x, dz), the fused ops' (y, mean, variance, dx, d scale, d offset), and the same from the
    batch norm (with the activation after it) and tf.gradients."""
    c = shape[1 if fmt == "NCHW" else 3]
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x, dz = tf.placeholder(tf.float32, shape), tf.placeholder(tf.float32, shape)
        scale = tf.constant(rng.uniform(0.5, 2, c).astype(np.float32))
        offset = tf.constant(rng.standard_normal(c).astype(np.float32))
        mean_w, square_w, within = bn_split_ops.batch_norm_moments(x, fmt)
        m, v, inv_std, scaled = bn_split_ops.batch_norm_from_moments(mean_w, square_w, within, scale, EPS)
        y = bn_split_ops.batch_norm_apply(x, m, inv_std, scale, offset, fmt, activation)
        z = y if activation else None
        d_scale, d_offset = bn_split_ops.batch_norm_grad_sums(dz, x, m, v, EPS, fmt, activation, z)
        dx, g_scale, g_offset = bn_split_ops.batch_norm_grad_apply(dz, x, m, inv_std, scaled, d_scale, d_offset, fmt,
                                                                   activation, z)
        ref_y, ref_m, ref_v = tf.nn.fused_batch_norm(x, scale, offset, epsilon=EPS, data_format=fmt)
        n = np.prod(shape) // c
        ref_v = ref_v * ((n - 1) / n)  # the returned variance is Bessel-corrected, the normalizing one not
        ref_y = {"": tf.identity, "Relu": tf.nn.relu, "Relu6": tf.nn.relu6}[activation](ref_y)
        ref_grads = tf.gradients(ref_y, [x, scale, offset], grad_ys=dz)
    feeds = {x: (rng.standard_normal(shape) * 2 + 1).astype(np.float32),
             dz: rng.standard_normal(shape).astype(np.float32)}
    return g, feeds, [y, m, v, dx, g_scale, g_offset], [ref_y, ref_m, ref_v, *ref_grads]


@pytest.mark.parametrize("fmt, activation, shape", [("NCHW", "", (4, 3, 5, 7)), ("NHWC", "", (4, 5, 7, 3)),
                                                    ("NCHW", "Relu6", (3, 6, 5, 3)), ("NHWC", "Relu", (3, 5, 3, 6))])
def test_the_chain_over_one_batch_is_the_batch_norm_and_its_gradient(fmt, activation, shape, device):
    g, feeds, mine, ref = _chain(fmt, activation, shape)
    with tf.Session(graph=g, device=device) as sess:
        got, want = sess.run([mine, ref], feeds)
    for name, a, b in zip(["y", "mean", "variance", "dx", "d scale", "d offset"], got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4, err_msg=f"{name} ({fmt}, {activation or 'none'})")


@needs_opencl
def test_each_op_is_one_or_two_launches_on_opencl():
    """The moments: one pass over x (fused.cl's channel sums) and a per-channel finish; the others one launch each
    (a tensor small enough for one chunk of sums)."""
    g, feeds, mine, _ = _chain("NCHW", "Relu6", (2, 4, 3, 5))
    with tf.Session(graph=g, device="opencl") as sess:
        sess.run(mine, feeds)
        rt, launches = sess.runtime, []
        run = rt.run

        def counted(k, *args):
            launches.append(k.name)
            return run(k, *args)
        rt.run = counted
        try:
            sess.run(mine, feeds)
        finally:
            del rt.run
    assert sorted(launches) == sorted(["relu_grad_bias_planes_f32", "bn_moments_finish_f32", "bn_from_moments_f32",
                                       "bn_normalize_f32", "relu_grad_bias_planes_f32", "bn_grad_split_f32"])


def test_the_statistics_passes_compute_a_norm_with_the_fused_ops_alone():
    """In every run of a batch-norm step in 4 micro-batches, a norm and its gradient are the fused ops (and the
    moving averages' Mul and Identity, the Consts): none of the chain of primitive ops it was before."""
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 3, 6, 6])
        y = tf.placeholder(tf.int32, [None])
        h = tf.nn.conv2d(x, tf.Variable(rng.standard_normal((3, 3, 3, 4)).astype(np.float32)), [1, 1, 1, 1],
                         "SAME", data_format="NCHW")
        h = tf.nn.relu6(tf.layers.batch_normalization(h, axis=1, training=True, name="bn"))
        logits = tf.matmul(tf.reshape(h, [-1, 144]), tf.Variable(rng.standard_normal((144, 3)).astype(np.float32)))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
            train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    p = planner.plan([train_op, loss], {x: (8, 3, 6, 6), y: (8,)}, "cpu", graph=g, force=(4, 1))
    assert p.microbatches == 4 and p.statistics
    norm = [op.type for ph in p.phases for op in ph.order if "/micro/" in op.name]
    assert set(norm) <= SPLIT_OPS | {"Const", "Identity", "Mul"}, sorted(set(norm) - SPLIT_OPS)
    assert SPLIT_OPS <= set(norm)


@pytest.mark.parametrize("fmt, activation, shape", [("NCHW", "Relu6", (3, 6, 5, 3)), ("NHWC", "Relu", (3, 5, 3, 6))])
def test_the_gradient_masked_from_x_is_the_gradient_masked_at_z(fmt, activation, shape, device):
    """_BatchNormGradApply with mask_from_x (the norm's offset in z's place: the mask remade from x as
    _BatchNormApply made z) gives dx and the sums it hands on bit for bit as with z given."""
    g, feeds, mine, _ = _chain(fmt, activation, shape)
    with g.as_default():
        (apply,) = [op for op in g.get_operations() if op.type == "_BatchNormGradApply"]
        (norm,) = [op for op in g.get_operations() if op.type == "_BatchNormApply"]
        dy, x, m, inv_std, scaled, d_scale, d_offset, _ = apply.inputs
        masked = bn_split_ops.batch_norm_grad_apply(dy, x, m, inv_std, scaled, d_scale, d_offset, fmt, activation,
                                                    offset=norm.inputs[4])
    assert masked[0].op.attrs["mask_from_x"] and norm.outputs[0] not in masked[0].op.inputs
    with tf.Session(graph=g, device=device) as sess:
        want, got, z = sess.run([list(apply.outputs), list(masked), norm.outputs[0]], feeds)
    assert 0 < np.count_nonzero(z) < z.size  # some values masked, some not: the mask is tested
    for name, a, b in zip(["dx", "d scale", "d offset"], got, want):
        np.testing.assert_array_equal(a, b, err_msg=f"{name} ({fmt}, {activation})")
