"""The sequence classifier (tfplus.graphs.seqnet): rows as time steps, its variables and parameter count, the
registered variants, training on every device (the loss falls on a fixed tiny batch) and the CLI."""
import math
from functools import partial

import numpy as np
import pytest
from modelcheck import assert_fits_a_fixed_batch, assert_planned_bytes_are_measured, random_feeds

import tfplus as tf
from tfplus.graphs import MODELS, get_model, training_graph
from tfplus.graphs.seqnet import rows_as_steps, seqnet

TINY = {"conv_widths": (6, 8, 8)}


def _feeds(tg, batch=8, size=8, seed=0):
    return random_feeds(tg, batch, size, seed)


def test_rows_become_time_steps_in_either_layout():
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)  # NCHW: 4 rows of 5 pixels
    with tf.Graph().as_default(), tf.Session() as s:
        nchw = s.run(rows_as_steps(tf.constant(x), "NCHW"))
        nhwc = s.run(rows_as_steps(tf.constant(x.transpose(0, 2, 3, 1)), "NHWC"))
    np.testing.assert_array_equal(nchw, nhwc)
    assert nchw.shape == (2, 4, 15)
    np.testing.assert_array_equal(nchw[1, 2, 3:6], x[1, :, 2, 1])  # step 2 (row 2), pixel 1: its 3 channels


def test_default_seqnet_variables_and_parameter_count():
    with tf.Graph().as_default():
        logits = seqnet(tf.placeholder(tf.float32, [None, 3, 32, 32]))
        params = {v.op.name: v.shape.as_list() for v in tf.trainable_variables()}
        assert len(tf.get_collection(tf.GraphKeys.UPDATE_OPS)) == 4
    assert logits.shape.as_list() == [None, 10]
    assert params["conv1d/kernel"] == [3, 96, 64]
    assert params["rnn1/gru_cell/gates/kernel"] == [64 + 128, 256]
    assert params["rnn2/gru_cell/candidate/kernel"] == [128 + 128, 128] and params["logits/kernel"] == [128, 10]
    gru = lambda d, u: 3 * ((d + u) * u + u)  # noqa: E731
    assert sum(math.prod(p) for p in params.values()) == 3 * 96 * 64 + 2 * 64 + gru(64, 128) + 2 * 128 \
        + gru(128, 128) + 128 * 10 + 10 == 192_906


def test_variants_are_registered_and_bidirectional_doubles_the_features():
    assert {"seqnet", "seqnet-lstm", "seqnet-bi", "seqnet-bilstm"} <= set(MODELS)
    with tf.Graph().as_default():
        get_model("seqnet-bilstm").build(tf.placeholder(tf.float32, [None, 3, 8, 8]), conv_widths=(4, 5, 6))
        params = {v.op.name: v.shape.as_list() for v in tf.trainable_variables()}
    assert params["rnn1/bw/lstm_cell/kernel"] == [4 + 5, 20] and params["rnn2/fw/lstm_cell/kernel"] == [10 + 6, 24]
    assert params["logits/kernel"] == [12, 10]
    with pytest.raises(ValueError, match="3 numbers"), tf.Graph().as_default():
        seqnet(tf.placeholder(tf.float32, [None, 3, 8, 8]), conv_widths=(4, 5))


@pytest.mark.parametrize("variant", [{}, {"cell": "lstm", "bidirectional": True}], ids=["gru", "bilstm"])
def test_training_steps_fit_a_fixed_batch(device, variant):
    # 4 rows, so 4 time steps: at 8 the opencl bilstm took 52 s here, most of it placing its plan's arena buffers.
    tg = training_graph(partial(seqnet, **variant), total_steps=100, seed=0, optimizer="adam", learning_rate=0.02,
                        schedule="const", image_shape=(3, 4, 4), model_kwargs=TINY)
    assert_fits_a_fixed_batch(tg, _feeds(tg, size=4), device)


def test_cli_trains_seqnet(tmp_path, capsys):
    from tfplus.cli import main
    code = main(["train", "--synthetic", "--model", "seqnet-lstm", "--widths", "4,6,6", "--batch-size", "8",
                 "--steps", "2", "--log-every", "1", "--log", str(tmp_path / "log.jsonl")])
    assert code == 0
    assert "test acc" in capsys.readouterr().out


def test_planned_bytes_are_measured_bytes():
    """Unrolled GRUs and batch norm on sequences declare their scratch."""
    tg = training_graph(seqnet, total_steps=10, seed=0, image_shape=(3, 4, 4), model_kwargs=TINY)  # 4 time steps
    assert_planned_bytes_are_measured(tg, _feeds(tg, batch=16, size=4))
