"""A sequence classifier of the keyword-spotting shape: Conv1D -> BatchNorm -> ReLU -> RNN -> BatchNorm -> RNN ->
time-distributed Dense, classifying from the mean of the per-step logits over time.

On CIFAR-10 each image is read row by row: 32 time steps of 96 features (a row's 32 pixels x 3 channels),
the "row-sequential CIFAR" task; the model does that reshape itself, so it takes the trainer's image batches.

    images = tf.placeholder(tf.float32, [None, 3, 32, 32])
    logits = seqnet(images, conv_widths=(64, 128, 128), cell="gru", training=True)    # (N, 10)

    tg = training_graph(functools.partial(seqnet, cell="lstm", bidirectional=True), total_steps=1000)

Variables: conv1d/kernel (3, 96, C) (no bias: BN's beta is one), bn1/..., rnn1/gru_cell/gates/kernel, ...,
bn2/..., rnn2/..., logits/kernel (U, 10), logits/bias. With bidirectional=True each RNN is
bidirectional_dynamic_rnn (rnnK/fw/..., rnnK/bw/...), its two directions concatenated (2U features).
"""
from __future__ import annotations

from typing import Callable, Sequence

import tfplus as tf
from tfplus import layers_ext
from tfplus.graphs.mentee import _check_data_format, decay

WIDTHS = (64, 128, 128)  # Conv1D filters, first RNN's units, second RNN's units
BN_MOMENTUM = 0.9
CELLS = {"gru": tf.nn.rnn_cell.GRUCell, "lstm": tf.nn.rnn_cell.LSTMCell}


def rows_as_steps(images: tf.Tensor, data_format: str) -> tf.Tensor:
    """(N, 3, H, W) or (N, H, W, 3) images -> (N, H, W * 3): one time step per row, each pixel's channels
    together (the same sequence from either layout)."""
    x = tf.transpose(images, [0, 2, 3, 1]) if data_format == "NCHW" else images
    _, h, w, c = x.shape.as_list()
    return tf.reshape(x, [-1, h, w * c])


def _rnn(x, name: str, units: int, cell: str, bidirectional: bool):
    make = CELLS[cell]
    with tf.variable_scope(name):
        if bidirectional:
            (fw, bw), _ = tf.nn.bidirectional_dynamic_rnn(make(units, name=f"{cell}_cell"),
                                                          make(units, name=f"{cell}_cell"), x, dtype=x.dtype,
                                                          scope=tf.get_variable_scope())
            y = tf.concat([fw, bw], 2)
        else:
            # The cell is named so that the evaluation graph (built again under reuse=True) finds its variables.
            y, _ = tf.nn.dynamic_rnn(make(units, name=f"{cell}_cell"), x, dtype=x.dtype,
                                     scope=tf.get_variable_scope())
    return y


def seqnet(images: tf.Tensor, conv_widths: Sequence[int] | None = None, fc_widths: Sequence[int] = (),
           num_classes: int = 10, cell: str = "gru", bidirectional: bool = False,
           training: bool | Callable[[str], bool] = True,
           data_format: str = "NCHW") -> tf.Tensor:
    """Logits (N, num_classes). conv_widths: (Conv1D filters, first RNN's units, second RNN's units), default
    WIDTHS; fc_widths: hidden time-distributed dense layers (ReLU) before the logits. cell: 'gru' or 'lstm'.
    training=True normalizes with batch statistics (moving-average updates in UPDATE_OPS); False with the
    moving ones; a callable decides per batch-norm layer (layers_ext.layer_training). Every kernel is in the
    WEIGHTS collection (weight decay); biases and BN are not."""
    _check_data_format(data_format)
    if cell not in CELLS:
        raise ValueError(f"seqnet: cell must be one of {', '.join(CELLS)}, got {cell!r}")
    widths = tuple(conv_widths) if conv_widths is not None else WIDTHS
    if len(widths) != 3:
        raise ValueError(f"seqnet: --widths takes 3 numbers (Conv1D filters, RNN 1 units, RNN 2 units), got {widths}")
    x = rows_as_steps(images, data_format)
    h = layers_ext.conv1d(x, widths[0], 3, padding="same", use_bias=False, name="conv1d",
                          kernel_initializer=tf.initializers.he_normal())
    h = tf.nn.relu(layers_ext.batch_normalization(h, momentum=BN_MOMENTUM, name="bn1",
                                                  training=layers_ext.layer_training(training, "bn1")))
    h = _rnn(h, "rnn1", widths[1], cell, bidirectional)
    h = layers_ext.batch_normalization(h, momentum=BN_MOMENTUM, name="bn2",
                                       training=layers_ext.layer_training(training, "bn2"))
    h = _rnn(h, "rnn2", widths[2], cell, bidirectional)
    for k, width in enumerate(fc_widths):
        h = tf.layers.dense(h, width, activation=tf.nn.relu, name=f"fc{k + 1}")
    per_step = tf.layers.dense(h, num_classes, name="logits")       # (N, time, classes): time-distributed
    for v in tf.trainable_variables():
        if v.op.name.endswith("kernel"):
            decay(v)
    return tf.reduce_mean(per_step, axis=1)
