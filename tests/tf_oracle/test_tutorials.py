"""The classic TF1 tutorial and model-zoo scripts (tests/tutorials.py) run with `import tfplus as tf` as they run
with TensorFlow's tf.compat.v1: the same losses, weights and outputs after a few training steps, with the same
initial values and random numbers. All of them on the cpu device; on OpenCL, those whose ops are new for them
(the rest share their kernels with the op table's OpenCL tests)."""
import numpy as np
import pytest
from conftest import needs_opencl
from tutorials import SCRIPTS, check_against_tensorflow, run_script, sessions_on_opencl

import tfplus
from tfplus.unsupported import UnsupportedError

_ON_OPENCL = ("word2vec_nce", "dilated", "transformer_block", "dcgan_carpedm20", "dqn", "birnn_classifier")


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_script_runs_as_in_tensorflow(tf1, name):
    check_against_tensorflow(tf1, run_script, name)


@needs_opencl
@pytest.mark.parametrize("name", _ON_OPENCL)
def test_script_runs_as_in_tensorflow_on_opencl(tf1, name, monkeypatch):
    sessions_on_opencl(monkeypatch)
    check_against_tensorflow(tf1, run_script, name)


@pytest.mark.xfail(raises=UnsupportedError, strict=True,
                   reason="tf.contrib.seq2seq's decoders (the NMT tutorial's TrainingHelper, BasicDecoder, "
                          "dynamic_decode) are not implemented: a while_loop driver of its own, too large for now")
def test_nmt_training_decoder_runs_as_dynamic_rnn():
    # With TrainingHelper, BasicDecoder and no output layer, dynamic_decode's outputs are dynamic_rnn's.
    rng = np.random.default_rng(0)
    with tfplus.Graph().as_default():
        tf = tfplus
        inputs = tf.constant(rng.standard_normal((2, 4, 3)).astype(np.float32))
        lengths = tf.constant([4, 2])
        cell = tf.nn.rnn_cell.GRUCell(5)
        helper = tf.contrib.seq2seq.TrainingHelper(inputs, lengths)
        decoder = tf.contrib.seq2seq.BasicDecoder(cell, helper, cell.zero_state(2, tf.float32))
        outputs, _, _ = tf.contrib.seq2seq.dynamic_decode(decoder)
        with tf.variable_scope("decoder", reuse=True):
            want, _ = tf.nn.dynamic_rnn(cell, inputs, sequence_length=lengths, dtype=tf.float32)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            got, want = sess.run([outputs.rnn_output, want])
        np.testing.assert_allclose(got, want[:, :got.shape[1]], rtol=1e-5)
