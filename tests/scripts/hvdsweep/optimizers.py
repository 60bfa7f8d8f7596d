# Every tf.train optimizer wrapped, at a fixed global batch split over the ranks (one process: the whole batch).
import os
import sys

import numpy as np

import tfplus as tf
import tfplus.distributed as hvd

hvd.init()
GLOBAL, STEPS = 12, 3
per = GLOBAL // hvd.size()
rng = np.random.RandomState(1)
X = rng.randn(STEPS * GLOBAL, 6).astype(np.float32)
Y = rng.randint(0, 4, len(X))
OPTIMIZERS = {
    "sgd": lambda: tf.train.GradientDescentOptimizer(0.1),
    "momentum": lambda: tf.train.MomentumOptimizer(0.05, 0.9),
    "nesterov": lambda: tf.train.MomentumOptimizer(0.05, 0.9, use_nesterov=True),
    "adam": lambda: tf.train.AdamOptimizer(0.01, beta1=0.8, epsilon=1e-6),
    "rmsprop": lambda: tf.train.RMSPropOptimizer(0.01, momentum=0.5),
    "rmsprop_centered": lambda: tf.train.RMSPropOptimizer(0.01, centered=True),
    "adagrad": lambda: tf.train.AdagradOptimizer(0.1, initial_accumulator_value=0.2),
    "adadelta": lambda: tf.train.AdadeltaOptimizer(1.0, rho=0.9),
    "ftrl": lambda: tf.train.FtrlOptimizer(0.1, l1_regularization_strength=0.001),
}
for name, make in OPTIMIZERS.items():
    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [None, 6])
    y = tf.placeholder(tf.int32, [None])
    tf.set_random_seed(7 + hvd.rank())
    hidden = tf.layers.dense(x, 8, activation=tf.nn.relu, name="hidden")
    logits = tf.layers.dense(hidden, 4, name="logits")
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    opt = hvd.DistributedOptimizer(make())
    train_op = opt.minimize(loss, global_step=tf.train.get_or_create_global_step())
    bcast = hvd.broadcast_global_variables(0)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        bcast.run()
        for i in range(STEPS):
            lo = i * GLOBAL + hvd.rank() * per
            sess.run(train_op, feed_dict={x: X[lo:lo + per], y: Y[lo:lo + per]})
        np.savez(os.path.join(sys.argv[1], f"optimizers_{name}-rank{hvd.rank()}.npz"),
                 **{v.op.name.replace("/", "."): sess.run(v) for v in tf.global_variables()})
