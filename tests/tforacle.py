"""Helpers for the conformance tests against TensorFlow (the `tf1` fixture is tf.compat.v1 in graph mode):
move a tfplus GraphDef into TensorFlow and run it there."""
from __future__ import annotations

import tfplus as tf


def import_into_tf(tf1, graph: tf.Graph):
    """A new TensorFlow graph holding `graph`'s nodes under their own names (our GraphDef, parsed by TF)."""
    tf_graph = tf1.Graph()
    with tf_graph.as_default():
        tf1.import_graph_def(tf1.GraphDef.FromString(graph.as_graph_def().SerializeToString()), name="")
    return tf_graph


def tf_tensors(tf_graph, tensors) -> list:
    """The TensorFlow tensors with the names of our `tensors` (after import_into_tf)."""
    return [tf_graph.get_tensor_by_name(t.name) for t in tensors]
