# A float16 layer beside a float32 one, trained together through one DistributedOptimizer (the cpu device: OpenCL's
# kernels take no float16).
import os
import sys

import numpy as np

import tfplus as tf
import tfplus.distributed as hvd

hvd.init()
GLOBAL, STEPS = 4, 3
per = GLOBAL // hvd.size()
rng = np.random.RandomState(14)
X = rng.randn(STEPS * GLOBAL, 3).astype(np.float32)
x = tf.placeholder(tf.float32, [None, 3])
tf.set_random_seed(hvd.rank())
w32 = tf.Variable(tf.random_normal([3, 3]), name="w32")
w16 = tf.Variable(tf.random_normal([3], dtype=tf.float16), name="w16")
h = tf.cast(tf.matmul(x, w32), tf.float16) * w16
loss = tf.reduce_mean(tf.square(tf.cast(h, tf.float32) - 0.5))
train_op = hvd.DistributedOptimizer(tf.train.GradientDescentOptimizer(0.05)).minimize(loss)
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    sess.run(hvd.broadcast_global_variables(0))
    for i in range(STEPS):
        lo = i * GLOBAL + hvd.rank() * per
        sess.run(train_op, {x: X[lo:lo + per]})
    np.savez(os.path.join(sys.argv[1], f"half-rank{hvd.rank()}.npz"), w32=sess.run(w32),
             w16=sess.run(w16))
