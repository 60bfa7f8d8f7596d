# An embedding model: its gradient is IndexedSlices; Horovod's default (sparse_as_dense=False) and True.
import os
import sys

import numpy as np

import tfplus as tf
import tfplus.distributed as hvd

hvd.init()
GLOBAL, STEPS, VOCAB = 8, 4, 20
per = GLOBAL // hvd.size()
rng = np.random.RandomState(7)
IDS = rng.randint(0, VOCAB, (STEPS * GLOBAL, 3))
Y = rng.randint(0, 2, STEPS * GLOBAL)
for dense in (False, True):
    for name, make in (("adam", lambda: tf.train.AdamOptimizer(0.1)),
                       ("momentum", lambda: tf.train.MomentumOptimizer(0.1, 0.9)),
                       ("adagrad", lambda: tf.train.AdagradOptimizer(0.3))):
        tf.reset_default_graph()
        ids = tf.placeholder(tf.int32, [None, 3])
        y = tf.placeholder(tf.int32, [None])
        table = tf.get_variable("table", [VOCAB, 4], initializer=tf.random_uniform_initializer(-1, 1, seed=1))
        out = tf.get_variable("out", [4, 2], initializer=tf.random_uniform_initializer(-1, 1, seed=2))
        pooled = tf.reduce_mean(tf.nn.embedding_lookup(table, ids), axis=1)
        loss = tf.losses.sparse_softmax_cross_entropy(y, tf.matmul(pooled, out))
        train_op = hvd.DistributedOptimizer(make(), sparse_as_dense=dense).minimize(loss)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            start = sess.run([table, out])
            for i in range(STEPS):
                lo = i * GLOBAL + hvd.rank() * per
                sess.run(train_op, {ids: IDS[lo:lo + per], y: Y[lo:lo + per]})
            np.savez(os.path.join(sys.argv[1], f"embeddings_{name}_{'dense' if dense else 'sparse'}-rank"
                                  f"{hvd.rank()}.npz"), table=sess.run(table), out=sess.run(out), table0=start[0],
                     out0=start[1])
