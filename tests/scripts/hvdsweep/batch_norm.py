# tf.layers.batch_normalization with UPDATE_OPS: the weights are averaged, the moving statistics are each rank's.
import os
import sys

import numpy as np

import tfplus as tf
import tfplus.distributed as hvd

hvd.init()
GLOBAL, STEPS = 8, 3
per = GLOBAL // hvd.size()
rng = np.random.RandomState(13)
X = (rng.randn(STEPS * GLOBAL, 4) + np.arange(STEPS * GLOBAL)[:, None] * 0.3).astype(np.float32)
Y = rng.randint(0, 2, len(X))
x = tf.placeholder(tf.float32, [None, 4])
y = tf.placeholder(tf.int32, [None])
training = tf.placeholder_with_default(True, [])
tf.set_random_seed(0)
h = tf.layers.dense(x, 5, use_bias=False)
h = tf.nn.relu(tf.layers.batch_normalization(h, training=training, momentum=0.9))
loss = tf.losses.sparse_softmax_cross_entropy(y, tf.layers.dense(h, 2))
update_ops = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
with tf.control_dependencies(update_ops):
    train_op = hvd.DistributedOptimizer(tf.train.MomentumOptimizer(0.1, 0.9)).minimize(loss)
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    sess.run(hvd.broadcast_global_variables(0))
    start = {"start." + v.op.name.replace("/", "."): sess.run(v) for v in tf.trainable_variables()}
    for i in range(STEPS):
        lo = i * GLOBAL + hvd.rank() * per
        sess.run(train_op, {x: X[lo:lo + per], y: Y[lo:lo + per]})
    np.savez(os.path.join(sys.argv[1], f"batch_norm-rank{hvd.rank()}.npz"),
             **start, **{v.op.name.replace("/", "."): sess.run(v) for v in tf.global_variables()})
