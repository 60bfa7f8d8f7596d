"""Recomputation in a run that trains two models at once (two losses, two train ops fetched together, as a
script that trains a classifier beside a sequence model does): a segment may join forward ops of both, and its
first reader, in the first model's backward pass, comes before the second model's inputs exist. Each copy is made
before the first reader that needs it, and every level trains as the plain plan."""
from __future__ import annotations

import numpy as np
import pytest
from modelcheck import assert_same_training, train_graph

import tfplus as tf
from tfplus import planner
from tfplus.planner import remat


@pytest.fixture(autouse=True)
def fast_solver(monkeypatch):
    monkeypatch.setattr(remat, "TIME_LIMIT", 0.25)


def _two_models():
    """A dense classifier on x and, built after it, an LSTM over the same x whose last relevant output is
    regressed to zero; each trained by its own optimizer, both in one run."""
    g = tf.Graph()
    rng = np.random.default_rng(0)
    with g.as_default():
        tf.set_random_seed(0)
        x = tf.placeholder(tf.float32, [None, 6, 5])
        y = tf.placeholder(tf.float32, [None, 3])
        lengths = tf.placeholder(tf.int32, [None])
        h = tf.layers.dense(tf.reshape(x, [-1, 30]), 16, tf.nn.relu)
        logits = tf.layers.dense(h, 3)
        loss1 = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(logits=logits, labels=y))
        train1 = tf.train.GradientDescentOptimizer(0.1).minimize(loss1)
        with tf.variable_scope("seq"):
            out, _ = tf.nn.dynamic_rnn(tf.nn.rnn_cell.BasicLSTMCell(8), x, dtype=tf.float32, sequence_length=lengths)
            last = out[:, -1]
        loss2 = tf.reduce_mean(tf.square(last))
        train2 = tf.train.AdamOptimizer(0.01).minimize(loss2)
        loss = loss1 + loss2
        init = tf.global_variables_initializer()
    feeds = {x: rng.standard_normal((4, 6, 5)).astype(np.float32),
             y: np.eye(3, dtype=np.float32)[rng.integers(0, 3, 4)],
             lengths: rng.integers(1, 7, 4).astype(np.int32)}
    return g, init, [train1, train2], loss, feeds


def test_every_recompute_level_of_two_models_trains_as_the_plain_plan():
    from tfplus.planner.plan import _Step
    from tfplus.runtime.facts import device_facts
    g, init, trains, loss, feeds = _two_models()
    with g.as_default():
        train = tf.group(*trains)
    shapes = {t: v.shape for t, v in feeds.items()}
    step = _Step([train, loss], shapes, device_facts("cpu"), g, None)
    levels = [r for r in step.levels() if r >= 1]
    joined = [r for r in levels for s in step.remat(r).segments  # a segment op made after its first reader
              if max(op._id for op in s.ops) > min(op._id for op in s.readers)]
    assert joined, "no segment has ops made after its first reader: the graph no longer poses the case"
    want = train_graph(g, init, train, loss, feeds, budget="1GB", force=(1, 1))
    for r in levels:
        p = planner.plan([train, loss], shapes, graph=g, force=(1, 1, False, 1, r))
        copies = [op.name for ph in p.phases for op in ph.order if "/recompute_" in op.name]
        assert len(copies) == len(set(copies)), r
        assert_same_training(want, train_graph(g, init, train, loss, feeds, budget="1GB", plan=p))
