# op=hvd.Sum: each rank divides its summed loss by the global batch, the ranks' gradients are added.
import os
import sys

import numpy as np

import tfplus as tf
import tfplus.distributed as hvd

hvd.init()
GLOBAL, STEPS = 7, 3  # does not divide by 2 or 3: rank r takes rows r, r + size, ...
rng = np.random.RandomState(4)
X = rng.randn(STEPS * GLOBAL, 4).astype(np.float32)
Y = rng.randint(0, 2, len(X)).astype(np.float32)
x = tf.placeholder(tf.float32, [None, 4])
y = tf.placeholder(tf.float32, [None])
tf.set_random_seed(hvd.rank())
w = tf.Variable(tf.random_normal([4, 1]), name="w")
b = tf.Variable(0.0, name="b")
logits = tf.squeeze(tf.matmul(x, w), [1]) + b
loss = tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logits)) / GLOBAL
train_op = hvd.DistributedOptimizer(tf.train.AdamOptimizer(0.05), op=hvd.Sum).minimize(loss)
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    sess.run(hvd.broadcast_variables(tf.global_variables(), root_rank=0))
    for i in range(STEPS):
        batch = slice(i * GLOBAL + hvd.rank(), (i + 1) * GLOBAL, hvd.size())
        sess.run(train_op, {x: X[batch], y: Y[batch]})
    np.savez(os.path.join(sys.argv[1], f"op_sum-rank{hvd.rank()}.npz"), w=sess.run(w), b=sess.run(b))
