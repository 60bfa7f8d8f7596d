# The Horovod recipe: a fixed batch per rank, the learning rate scaled by the number of ranks.
import os
import sys

import numpy as np

import tfplus as tf
import tfplus.distributed as hvd

hvd.init()
BATCH, STEPS = 4, 3  # per rank
rng = np.random.RandomState(0)
X = rng.randn(STEPS * BATCH * hvd.size(), 5).astype(np.float32)
Y = rng.randint(0, 3, len(X))

x = tf.placeholder(tf.float32, [None, 5])
y = tf.placeholder(tf.int64, [None])
tf.set_random_seed(hvd.rank() + 1)  # different on each rank: the broadcast must fix it
w = tf.get_variable("w", [5, 3], initializer=tf.glorot_uniform_initializer())
b = tf.get_variable("b", [3], initializer=tf.zeros_initializer())
loss = tf.losses.sparse_softmax_cross_entropy(y, tf.matmul(x, w) + b)
opt = tf.train.GradientDescentOptimizer(0.05 * hvd.size())
opt = hvd.DistributedOptimizer(opt)
global_step = tf.train.get_or_create_global_step()
train_op = opt.minimize(loss, global_step=global_step)
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    sess.run(hvd.broadcast_global_variables(0))
    start = sess.run(w)
    for i in range(STEPS):
        lo = (i * hvd.size() + hvd.rank()) * BATCH  # rank r's slice of the i-th global batch
        sess.run(train_op, {x: X[lo:lo + BATCH], y: Y[lo:lo + BATCH]})
    np.savez(os.path.join(sys.argv[1], f"lr_scaled-rank{hvd.rank()}.npz"), w0=start, w=sess.run(w), b=sess.run(b),
             step=sess.run(global_step), X=X, Y=Y)
