# compute_gradients, clip by global norm, apply_gradients: the Horovod way to clip averaged gradients.
import os
import sys

import numpy as np

import tfplus as tf
import tfplus.distributed as hvd

hvd.init()
GLOBAL, STEPS = 8, 3
per = GLOBAL // hvd.size()
rng = np.random.RandomState(6)
X = rng.randn(STEPS * GLOBAL, 5).astype(np.float32) * 3
Y = rng.randint(0, 3, len(X))
x = tf.placeholder(tf.float32, [None, 5])
y = tf.placeholder(tf.int64, [None])
tf.set_random_seed(hvd.rank())
w = tf.Variable(tf.random_normal([5, 3]), name="w")
b = tf.Variable(tf.zeros([3]), name="b")
loss = tf.losses.sparse_softmax_cross_entropy(y, tf.matmul(x, w) + b)
global_step = tf.train.get_or_create_global_step()
opt = hvd.DistributedOptimizer(tf.train.MomentumOptimizer(0.1, 0.9))
grads_and_vars = opt.compute_gradients(loss)
grads, variables = zip(*grads_and_vars)
clipped, norm = tf.clip_by_global_norm(grads, 0.5)
train_op = opt.apply_gradients(zip(clipped, variables), global_step=global_step)
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    sess.run(hvd.broadcast_global_variables(0))
    norms = []
    for i in range(STEPS):
        lo = i * GLOBAL + hvd.rank() * per
        norms.append(sess.run([train_op, norm], {x: X[lo:lo + per], y: Y[lo:lo + per]})[1])
    np.savez(os.path.join(sys.argv[1], f"split_clip-rank{hvd.rank()}.npz"), w=sess.run(w), b=sess.run(b),
             norms=np.array(norms), step=sess.run(global_step))
