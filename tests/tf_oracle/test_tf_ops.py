"""Every op-table case against TensorFlow: the case's graph, exported with as_graph_def() and imported into
TensorFlow, gives the same outputs there as here, and tf.gradients on both sides give the same gradients
(float64). Cases that other test modules add to the table are covered here without any edit. NCHW cases of
ops whose TensorFlow CPU kernels run only NHWC run there in NHWC between transposes (tforacle.nchw_as_nhwc)."""
from __future__ import annotations

import numpy as np
import pytest
from cases_bn_split import CASES as BN_SPLIT_CASES
from cases_fused import CASES as FUSED_CASES
from cases_image import CASES as IMAGE_CASES
from cases_rnn_fused import CASES as RNN_FUSED_CASES
from optable import all_cases
from tforacle import import_into_tf, tf_tensors

import tfplus as tf

CASES = all_cases()

# Ops that are not TensorFlow's, so their op-table cases are not collected here:
# - the graph rewrite's fused ops (tfplus.engine.rewrite; tests/cases_fused.py): tests/engine/test_optimize.py
#   compares a fused training step with the unfused one, whose ops are compared with TensorFlow here;
# - the fused recurrent cells (tfplus.engine.rewrite_rnn; tests/cases_rnn_fused.py): tests/engine/test_rnn_fused.py
#   compares fused training steps with the unfused ones, and tests/ops/test_rnn.py runs the cells against TF;
# - CifarAugment, the trainer's device input (tests/cases_image.py): checked against a per-pixel NumPy reference
#   and the host pipeline;
# - batch norm's micro-batch ops (planner.crossbatch; tests/cases_bn_split.py): each against the chain of
#   TensorFlow ops it replaces in tests/ops/test_bn_split.py, and split steps against TensorFlow's unsplit one in
#   tests/planner/test_crossbatch.py.
# Any other case whose graph uses an op TensorFlow lacks fails, asking for it to be left out with a reason.
_TFPLUS_ONLY = {c.name for c in FUSED_CASES + IMAGE_CASES + RNN_FUSED_CASES + BN_SPLIT_CASES}

# Cases left out on purpose, and why. Each is still checked against NumPy and finite differences by
# test_op_table.
_CONTROL_FLOW = "tfplus's If/While hold sub-graphs, which do not export to a GraphDef; test_control_flow " \
                "builds the same programs in TensorFlow and compares values and gradients"
EXCLUDED_FORWARD: dict[str, str] = {
    **dict.fromkeys(["while_loop", "while_loop_dynamic_max_iterations", "cond_true", "cond_false"], _CONTROL_FLOW),
    "fused_batch_norm_grad_v3_infer_nchw": "TF's CPU FusedBatchNormGrad runs inference mode in NHWC only (and "
                                           "several outputs defeat the NHWC rewrite); test_nn_ext_tf compares it",
    "depthwise_nhwc_2x3_valid_mult3": "TF's CPU depthwise convolution needs equal row and column strides; "
                                      "the NumPy reference and finite differences check this case",
}
EXCLUDED_GRADIENT = {
    **EXCLUDED_FORWARD,
    "snapshot": "TensorFlow registers no gradient for Snapshot (LookupError); ours passes dy through, which "
                "finite differences confirm",
    "softmax_xent_both_outputs": "TF's gradient ignores that the backprop output (softmax - labels) depends on "
                                 "the labels (d backprop / d labels = -I); ours includes it and matches finite "
                                 "differences",
}

# Forward tolerances by dtype: both sides compute in the dtype, in different orders.
TOL = {"float16": (2e-3, 2e-3), "float32": (2e-5, 2e-6), "float64": (1e-10, 1e-12)}

# Cases where TensorFlow's float64 kernel is the less exact side: (rtol, atol) for float64 values and gradients.
# TF's CTCLoss in float64 is 1e-9 off the sum over every alignment, which ours matches to 1e-12 (test_op_table).
FLOAT64_TOL = dict.fromkeys(["ctc_loss", "ctc_loss_unmerged", "ctc_loss_collapsed_labels"], (1e-6, 1e-7))


def _tf_cannot_run(graph: tf.Graph, tf1) -> str | None:
    """Why TensorFlow cannot run this graph (a dtype its op does not take), or None."""
    from tensorflow.python.framework import op_def_registry

    for op in graph.get_operations():
        assert op_def_registry.get(op.type) is not None, \
            f"op {op.type} is not a TensorFlow op: leave its cases out of this module, with the reason"
        for attr in op_def_registry.get(op.type).attr:  # e.g. TF's LRN and FusedBatchNorm have no float64
            allowed = attr.allowed_values.list.type
            value = op.attrs.get(attr.name)
            if attr.type == "type" and allowed and value is not None and _tf_enum(value) not in allowed:
                return f"TensorFlow's {op.type} does not take {attr.name}={value.name}"
    return None


def _tf_enum(dtype) -> int:
    from tensorflow.python.framework import dtypes

    return dtypes.as_dtype(dtype.name).as_datatype_enum


def _build(case, dtype, tf1):
    g = tf.Graph()
    with g.as_default():
        phs, outs, arrays = case.build_graph(dtype)
    reason = _tf_cannot_run(g, tf1)
    if reason:
        pytest.skip(reason)
    return g, phs, outs, arrays


def _compare(got, want, what, rtol, atol):
    assert got.shape == want.shape, f"{what}: shape {got.shape}, TensorFlow {want.shape}"
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


@pytest.mark.parametrize("case,dtype", [pytest.param(c, d, id=f"{c.name}-{d}") for c in CASES for d in c.dtypes
                                        if c.name not in EXCLUDED_FORWARD and c.name not in _TFPLUS_ONLY])
def test_forward_matches_tensorflow(case, dtype, tf1):
    g, phs, outs, arrays = _build(case, dtype, tf1)
    with tf.Session(graph=g) as sess:
        mine = sess.run(outs, dict(zip(phs, arrays)))
    tg = import_into_tf(tf1, g)
    with tf1.Session(graph=tg) as sess:
        theirs = sess.run(tf_tensors(tg, outs), dict(zip(tf_tensors(tg, phs), arrays)))
    for k, (t, a, b) in enumerate(zip(outs, mine, theirs)):
        assert a.dtype == b.dtype, f"{case.name} output {k} ({t.op.type}): {a.dtype}, TensorFlow {b.dtype}"
        tol = FLOAT64_TOL.get(case.name) if dtype == "float64" else None
        _compare(a, b, f"{case.name}[{dtype}] output {k} ({t.op.type} '{t.op.name}')",
                 *(tol or TOL.get(dtype, (0, 0))))


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES
                                  if c.grad and c.name not in EXCLUDED_GRADIENT and c.name not in _TFPLUS_ONLY])
def test_gradient_matches_tensorflow(case, tf1):
    """d sum(w * outputs) / d inputs by our tf.gradients and by TensorFlow's, on the same GraphDef."""
    g, phs, outs, arrays = _build(case, "float64", tf1)
    which = case.grad_inputs(arrays)
    feeds = dict(zip(phs, arrays))
    rng = np.random.default_rng(case.seed + 2)
    with tf.Session(graph=g) as sess:
        values = sess.run(outs, feeds)
    weights = [rng.standard_normal(v.shape) if t.dtype.is_floating else None for t, v in zip(outs, values)]
    tg = import_into_tf(tf1, g)  # the forward graph only, before our gradient nodes are added

    def grads(lib, outputs, inputs):
        loss = lib.add_n([lib.reduce_sum(t * lib.constant(w, dtype=t.dtype))
                          for t, w in zip(outputs, weights) if w is not None])
        # TF's gradient of a gather is IndexedSlices: made dense to compare
        return [None if d is None else lib.convert_to_tensor(d)
                for d in lib.gradients(loss, [inputs[i] for i in which])]

    with g.as_default():
        mine = grads(tf, outs, phs)
    with tg.as_default():
        theirs = grads(tf1, tf_tensors(tg, outs), tf_tensors(tg, phs))
    assert [m is None for m in mine] == [t is None for t in theirs], \
        f"{case.name}: inputs with no gradient differ: ours {mine}, TensorFlow {theirs}"
    with tf.Session(graph=g) as sess:
        mine_v = sess.run([m for m in mine if m is not None], feeds)
    with tf1.Session(graph=tg) as sess:
        theirs_v = sess.run([t for t in theirs if t is not None], dict(zip(tf_tensors(tg, phs), arrays)))
    for i, a, b in zip([i for i, m in zip(which, mine) if m is not None], mine_v, theirs_v):
        _compare(a, b, f"{case.name}: gradient of input {i}", *FLOAT64_TOL.get(case.name, (1e-9, 1e-12)))


def test_exclusions_name_cases_of_the_table():
    names = {c.name for c in CASES}
    stale = sorted((set(EXCLUDED_FORWARD) | set(EXCLUDED_GRADIENT) | set(FLOAT64_TOL)) - names)
    assert not stale, f"excluded cases that are no longer in the op table: {stale}"
