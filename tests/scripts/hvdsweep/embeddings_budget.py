# An embedding model in a session under a memory budget: the gathered rows of the sparse gradient must have a
# shape the planner can size.
import os
import sys

import numpy as np

import tfplus as tf
import tfplus.distributed as hvd

hvd.init()
GLOBAL, STEPS = 32, 2
per = GLOBAL // hvd.size()
rng = np.random.RandomState(16)
IDS = rng.randint(0, 300, (STEPS * GLOBAL, 3))
Y = rng.randint(0, 2, STEPS * GLOBAL)
tf.set_random_seed(0)
ids = tf.placeholder(tf.int32, [per, 3])
y = tf.placeholder(tf.int32, [per])
table = tf.get_variable("table", [300, 32])
hidden = tf.layers.dense(tf.reduce_mean(tf.nn.embedding_lookup(table, ids), axis=1), 128, tf.nn.relu)
loss = tf.losses.sparse_softmax_cross_entropy(y, tf.layers.dense(hidden, 2))
train_op = hvd.DistributedOptimizer(tf.train.MomentumOptimizer(0.1, 0.9)).minimize(loss)
with tf.Session(memory_budget="600KB") as sess:
    sess.run(tf.global_variables_initializer())
    sess.run(hvd.broadcast_global_variables(0))
    for i in range(STEPS):
        lo = i * GLOBAL + hvd.rank() * per
        sess.run(train_op, {ids: IDS[lo:lo + per], y: Y[lo:lo + per]})
    np.savez(os.path.join(sys.argv[1], f"embeddings_budget-rank{hvd.rank()}.npz"),
             **{v.op.name.replace("/", "."): sess.run(v) for v in tf.trainable_variables()})
