"""Writes three CIFAR-sized training MetaGraphs whose updates wait (control inputs) for ops of the forward and
backward pass (issue 34), for `tfplus plan --graph FILE`: a tfplus.keras CNN's training function (its updates wait
for the loss and the accuracy), a TF1 script whose train op waits for the loss and the accuracy, and the same
script ungated, whose export adds the updates' waits for the reads of the weights (as TensorFlow needs them).

    python benchmarks/export_control_graphs.py graphs/
    tfplus plan --graph graphs/keras.meta --batch-size 64 --memory-budget 4MB
"""
from __future__ import annotations

import argparse
import os

import tfplus as tf


def _conv_net(x):
    """Two 3x3 conv layers (16, 32 channels) with max-pools, a 64-wide dense layer, 10 logits."""
    h = tf.layers.max_pooling2d(tf.layers.conv2d(x, 16, 3, padding="same", activation=tf.nn.relu), 2, 2)
    h = tf.layers.max_pooling2d(tf.layers.conv2d(h, 32, 3, padding="same", activation=tf.nn.relu), 2, 2)
    h = tf.layers.dense(tf.layers.flatten(h), 64, activation=tf.nn.relu)
    return tf.layers.dense(h, 10)


def script(gated: bool) -> None:
    x = tf.placeholder(tf.float32, [None, 32, 32, 3], name="images")
    y = tf.placeholder(tf.int32, [None], name="labels")
    logits = _conv_net(x)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    acc = tf.reduce_mean(tf.cast(tf.nn.in_top_k(logits, y, 1), tf.float32))
    with tf.control_dependencies([loss, acc] if gated else None):
        train = tf.train.MomentumOptimizer(0.05, 0.9).minimize(loss)
    tf.add_to_collection(tf.GraphKeys.TRAIN_OP, train)


def keras() -> None:
    k = tf.keras
    model = k.Sequential([k.layers.Conv2D(16, 3, padding="same", activation="relu", input_shape=(32, 32, 3)),
                          k.layers.MaxPooling2D(), k.layers.Conv2D(32, 3, padding="same", activation="relu"),
                          k.layers.MaxPooling2D(), k.layers.Flatten(), k.layers.Dense(64, activation="relu"),
                          k.layers.Dense(10)])
    model.compile(k.optimizers.SGD(0.05, momentum=0.9), k.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    # Keras's target placeholder leaves every dimension open; plan --graph needs all but the batch's
    model.targets[0].op.attrs["shape"] = (None, 1)
    tf.add_to_collection(tf.GraphKeys.TRAIN_OP, model._train_step())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    folder = parser.parse_args().folder
    os.makedirs(folder, exist_ok=True)
    for name, build in (("keras", keras), ("gated", lambda: script(True)), ("plain", lambda: script(False))):
        with tf.Graph().as_default():
            build()
            tf.train.export_meta_graph(os.path.join(folder, f"{name}.meta"))
        print(os.path.join(folder, f"{name}.meta"))


if __name__ == "__main__":
    main()
