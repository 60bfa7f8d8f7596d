"""MobileNet v1 (tfplus.graphs.mobilenet): layers and parameters, training with batch norm on every device
(moving averages updated by the train op, evaluation in inference mode), the CLI, and the memory planner
(planned == measured bytes; no micro-batching of training-mode batch norm)."""
import math

import numpy as np
import pytest
from conftest import needs_opencl
from modelcheck import (
    assert_fits_a_fixed_batch,
    assert_graphdef_round_trips,
    assert_planned_bytes_are_measured,
    random_feeds,
)

import tfplus as tf
from tfplus import planner
from tfplus.graphs import get_model, training_graph
from tfplus.graphs.mobilenet import mobilenet, widths

TINY = {"conv_widths": (8, 8, 16)}  # the stem and two blocks (the second strided)


def _feeds(tg, batch=8, size=16, seed=0):
    return random_feeds(tg, batch, size, seed)


def _tiny_graph(**kw):
    return training_graph(mobilenet, total_steps=100, seed=0, learning_rate=0.05, schedule="const",
                          image_shape=(3, 16, 16), model_kwargs=dict(TINY, **kw))


def test_default_mobilenet_layers_and_parameter_count():
    g = tf.Graph()
    with g.as_default():
        logits = mobilenet(tf.placeholder(tf.float32, [None, 3, 32, 32]))
        params = {v.op.name: v.shape.as_list() for v in tf.trainable_variables()}
        moving = [v.op.name for v in tf.global_variables() if "moving" in v.op.name]
        assert len(tf.get_collection(tf.GraphKeys.UPDATE_OPS)) == 2 * 27
    assert logits.shape.as_list() == [None, 10]
    assert params["conv0/weights"] == [3, 3, 3, 32] and params["block1/dw/depthwise_weights"] == [3, 3, 32, 1]
    assert params["block13/pw/weights"] == [1, 1, 1024, 1024] and params["logits/weights"] == [1024, 10]
    assert params["block13/pw/bn/gamma"] == [1024] and len(moving) == 2 * 27
    ws = (3,) + widths(1.0)
    convs = 27 * 32 + sum(9 * a + a * b for a, b in zip(ws[1:], ws[2:]))
    bn = 2 * sum(ws[1:]) + 2 * sum(ws[1:-1])  # gamma and beta: the stem and each pw, each dw (its input)
    assert sum(math.prod(s) for s in params.values()) == convs + bn + 1024 * 10 + 10 == 3_217_226
    assert widths(0.25)[:4] == (8, 16, 32, 32)


@pytest.mark.parametrize("data_format", ["NCHW", "NHWC"])
def test_strided_blocks_end_at_2x2(data_format):
    with tf.Graph().as_default():
        shape = [2, 3, 32, 32] if data_format == "NCHW" else [2, 32, 32, 3]
        mobilenet(tf.placeholder(tf.float32, shape), width_multiplier=0.25, data_format=data_format)
        last = tf.get_default_graph().get_operation_by_name("block13/pw/bn/FusedBatchNormV3").outputs[0]
        assert last.shape.as_list() == ([2, 256, 2, 2] if data_format == "NCHW" else [2, 2, 2, 256])


def test_training_graph_updates_moving_averages_and_evaluates_in_inference_mode():
    tg = _tiny_graph()
    bns = [op for op in tg.graph.get_operations() if op.type == "FusedBatchNormV3"]
    assert len(bns) == 2 * 5  # every BN built twice: training (the loss) and inference (the predictions)
    from tfplus.framework import needed_ops
    pred_bns = [op for op in needed_ops([tg.predictions], {tg.images}) if op.type == "FusedBatchNormV3"]
    assert len(pred_bns) == 5 and not any(op.attrs["is_training"] for op in pred_bns)
    loss_bns = [op for op in needed_ops([tg.loss], {tg.images, tg.labels}) if op.type == "FusedBatchNormV3"]
    assert len(loss_bns) == 5 and all(op.attrs["is_training"] for op in loss_bns)
    feeds = _feeds(tg)
    with tf.Session(graph=tg.graph) as sess:
        sess.run(tg.init_op)
        mm = tg.graph.get_tensor_by_name("conv0/bn/moving_mean:0")
        before = sess.run(mm)
        sess.run(tg.predictions, {tg.images: feeds[tg.images]})
        np.testing.assert_array_equal(sess.run(mm), before)  # evaluation updates nothing
        sess.run(tg.train_op, feeds)
        after = sess.run(mm)
    # momentum 0.9: moving = 0.9 * 0 + 0.1 * the batch mean of conv0's output
    assert np.abs(after).max() > 0 and not np.allclose(after, before)


def test_training_steps_fit_a_fixed_batch(device):
    tg = _tiny_graph()
    assert_fits_a_fixed_batch(tg, _feeds(tg), device)


def test_cli_trains_mobilenet(tmp_path, capsys):
    from tfplus.cli import main
    code = main(["train", "--synthetic", "--model", "mobilenet", "--widths", "8,8,16", "--batch-size", "8",
                 "--steps", "3", "--log-every", "1", "--log", str(tmp_path / "log.jsonl")])
    assert code == 0
    assert "test acc" in capsys.readouterr().out


def test_planned_bytes_are_measured_bytes():
    """Every depthwise and batch-norm kernel's scratch is declared."""
    tg = _tiny_graph()
    assert_planned_bytes_are_measured(tg, _feeds(tg, batch=16))


def test_a_tight_budget_micro_batches_training_batch_norm_in_statistics_passes():
    """Training-mode batch norm micro-batches with statistics passes (planner.crossbatch), which the budget
    search takes only where cheaper plans do not fit; inference-mode batch norm needs none."""
    tg = _tiny_graph()
    feeds = _feeds(tg, batch=16)
    shapes = {t: v.shape for t, v in feeds.items()}
    fetches = [tg.train_op, tg.loss]
    assert planner.plan(fetches, shapes, graph=tg.graph, force=(2, 1)).statistics
    free = planner.plan(fetches, shapes, graph=tg.graph)
    assert free.microbatches == 1 and not free.notes
    small = planner.smallest_plan(fetches, shapes, graph=tg.graph)
    p = planner.plan(fetches, shapes, graph=tg.graph, budget=small.peak_bytes)
    assert p.microbatches > 1 and p.statistics and "statistics passes" in p.choice + str(p.transformations)
    # Evaluation (inference-mode batch norm) is micro-batched without statistics passes.
    evaluation = planner.plan([tg.predictions], {tg.images: (16, 3, 16, 16)}, graph=tg.graph, force=(2, 1))
    assert evaluation.microbatches == 2 and not evaluation.statistics and not evaluation.notes


def test_plan_cli_says_batch_norm_runs_in_statistics_passes(capsys):
    from tfplus.cli import main
    assert main(["plan", "--model", "mobilenet", "--widths", "4,8,8", "--batch-size", "16", "--budget", "1kB"]) == 1
    out = capsys.readouterr().out
    assert "does NOT fit" in out and "statistics passes" in out and "5 training-mode batch norms" in out


def test_model_is_registered():
    assert get_model("mobilenet").build is mobilenet


@needs_opencl
def test_opencl_ledger_measures_the_planned_peak():
    """On opencl, a planned MobileNet step trains as the plain one, holds exactly the plan's peak and creates
    no device buffer (the batch-norm and depthwise kernels need no scratch)."""
    from modelcheck import train_opencl
    tg = _tiny_graph()
    feeds = _feeds(tg, batch=8)
    want = train_opencl(tg, feeds)
    losses, weights, p, m = train_opencl(tg, feeds, (1, 1))
    np.testing.assert_allclose(losses, want[0], rtol=1e-5)
    for name, w in want[1].items():
        np.testing.assert_allclose(weights[name], w, rtol=1e-4, atol=1e-6, err_msg=name)
    assert m["allocations"] == 0 and m["peak"] == p.peak_bytes, (m, p.peak_bytes)


def test_training_graph_graphdef_round_trip():
    assert_graphdef_round_trips(_tiny_graph().graph)


def test_weight_decay_counts_each_weight_once():
    """The model is built twice (training and evaluation logits) on the same weights: the L2 term is still
    weight_decay * sum(w^2) / 2 over each decayed weight once (a doubled one trained with twice the decay)."""
    tg = training_graph(mobilenet, total_steps=10, seed=0, weight_decay=0.5, image_shape=(3, 16, 16),
                        model_kwargs=TINY)
    decayed = tg.graph.get_collection("weights")
    assert sorted(v.op.name for v in decayed) == \
        ["block1/pw/weights", "block2/pw/weights", "conv0/weights", "logits/weights"]
    feeds = _feeds(tg)
    with tf.Session(graph=tg.graph) as sess:
        sess.run(tg.init_op)
        loss, xent, ws = sess.run([tg.loss, tg.cross_entropy, decayed], feeds)
    np.testing.assert_allclose(loss - xent, 0.5 * sum((w.astype(np.float64) ** 2).sum() / 2 for w in ws), rtol=1e-4)
