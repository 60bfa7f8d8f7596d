# Horovod's input pipeline: a tf.data dataset sharded by rank, batched, repeated, read by a one-shot iterator.
import os
import sys

import numpy as np

import tfplus as tf
import tfplus.distributed as hvd

hvd.init()
GLOBAL, STEPS = 8, 3
rng = np.random.RandomState(15)
X = rng.randn(STEPS * GLOBAL, 5).astype(np.float32)
Y = rng.randint(0, 3, len(X)).astype(np.int64)
dataset = tf.data.Dataset.from_tensor_slices((X, Y)).shard(hvd.size(), hvd.rank())
features, labels = dataset.batch(GLOBAL // hvd.size()).repeat().make_one_shot_iterator().get_next()
tf.set_random_seed(hvd.rank())
logits = tf.layers.dense(tf.layers.dense(features, 4, tf.nn.relu), 3)
loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
train_op = hvd.DistributedOptimizer(tf.train.AdagradOptimizer(0.2)).minimize(
    loss, global_step=tf.train.get_or_create_global_step())
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    sess.run(hvd.broadcast_global_variables(0))
    for _ in range(STEPS):
        sess.run(train_op)
    np.savez(os.path.join(sys.argv[1], f"tfdata_shard-rank{hvd.rank()}.npz"),
             **{v.op.name.replace("/", "."): sess.run(v) for v in tf.trainable_variables()})
