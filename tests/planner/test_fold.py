"""The planner folds the values its shape functions need (liveness._fold) once per tensor: a value whose ancestry
joins and splits again (a ResNet's residual adds, in the forward pass and its gradient) was walked once per path,
so a ResNet-20 third's floor search spent 88 of its 92 s there."""
from __future__ import annotations

import pytest

import tfplus as tf
from tfplus.framework import needed_ops, topo_order
from tfplus.planner import PlanError, liveness


def test_a_value_behind_many_joins_is_walked_once_per_tensor(monkeypatch):
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [4, 3])
        h = x
        for _ in range(20):  # 2**20 paths from the tile's multiples back to x
            h = h + tf.nn.relu(h)
        y = tf.tile(x, tf.stack([tf.cast(tf.reduce_max(h), tf.int32), 1]))
    calls = []
    fold = liveness._fold
    monkeypatch.setattr(liveness, "_fold", lambda *a: calls.append(a[0]) or fold(*a))
    order = topo_order(needed_ops([y], {x}))
    with pytest.raises(PlanError, match="Tile"):  # its shape follows from the batch's values
        liveness.static_specs(order, {x: (4, 3)})
    assert len(calls) <= 3 * len(order), len(calls)
