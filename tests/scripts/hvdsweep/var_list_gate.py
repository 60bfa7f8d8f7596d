# minimize with var_list, gate_gradients and global_step: only the listed variables train.
import os
import sys

import numpy as np

import tfplus as tf
import tfplus.distributed as hvd

hvd.init()
GLOBAL, STEPS = 6, 3
per = GLOBAL // hvd.size()
rng = np.random.RandomState(5)
X = rng.randn(STEPS * GLOBAL, 3).astype(np.float32)
x = tf.placeholder(tf.float32, [None, 3])
tf.set_random_seed(11)
w = tf.Variable(tf.random_normal([3, 3]), name="w")
frozen = tf.Variable(tf.random_normal([3]), name="frozen")
loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + frozen - 1.0))
step = tf.Variable(0, trainable=False, name="my_step", dtype=tf.int64)
opt = hvd.DistributedOptimizer(tf.train.RMSPropOptimizer(0.01))
train_op = opt.minimize(loss, global_step=step, var_list=[w], gate_gradients=tf.train.Optimizer.GATE_GRAPH)
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    for i in range(STEPS):
        lo = i * GLOBAL + hvd.rank() * per
        _, loss_value = sess.run([train_op, loss], {x: X[lo:lo + per]})
    np.savez(os.path.join(sys.argv[1], f"var_list_gate-rank{hvd.rank()}.npz"), w=sess.run(w),
             frozen=sess.run(frozen), step=sess.run(step))
