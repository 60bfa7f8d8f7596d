# DistributedOptimizer with the keyword arguments Horovod's docs show.
import os
import sys

import numpy as np

import tfplus as tf
import tfplus.distributed as hvd

hvd.init()
GLOBAL, STEPS = 8, 3
per = GLOBAL // hvd.size()
rng = np.random.RandomState(2)
X = rng.randn(STEPS * GLOBAL, 5).astype(np.float32)
T = rng.randn(STEPS * GLOBAL, 2).astype(np.float32)
x = tf.placeholder(tf.float32, [None, 5])
t = tf.placeholder(tf.float32, [None, 2])
tf.set_random_seed(hvd.rank())
w = tf.Variable(tf.random_normal([5, 2], stddev=0.3), name="w")
loss = tf.reduce_mean(tf.square(tf.tanh(tf.matmul(x, w)) - t))
opt = tf.train.MomentumOptimizer(learning_rate=0.1, momentum=0.9)
opt = hvd.DistributedOptimizer(opt, name="DistMomentum", use_locking=False, device_dense="/cpu:0",
                               device_sparse="/cpu:0", compression=hvd.Compression.none, sparse_as_dense=False,
                               backward_passes_per_step=1, op=hvd.Average)
train_op = opt.minimize(loss)
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    sess.run(hvd.broadcast_global_variables(0))
    for i in range(STEPS):
        lo = i * GLOBAL + hvd.rank() * per
        sess.run(train_op, {x: X[lo:lo + per], t: T[lo:lo + per]})
    np.savez(os.path.join(sys.argv[1], f"kwargs-rank{hvd.rank()}.npz"), w=sess.run(w))
