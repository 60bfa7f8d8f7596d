# hvd.broadcast of tensors that are not variables (a seed, a shuffled order) and broadcast_variables of a subset.
import os
import sys

import numpy as np

import tfplus as tf
import tfplus.distributed as hvd

hvd.init()
r = hvd.rank()
order = tf.placeholder(tf.int32, [6])
seed = tf.constant(1000 + r, tf.int64)
shared_order = hvd.broadcast(order, root_rank=0)
shared_seed = hvd.broadcast(seed, hvd.size() - 1)
scale = hvd.broadcast(tf.constant(2.5 * (r + 1), tf.float16), 0)
a = tf.Variable(tf.fill([2, 2], float(r)), name="a")
c = tf.Variable(tf.fill([3], float(r)), name="c")
sync_a = hvd.broadcast_variables([a], root_rank=hvd.size() - 1)
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    got = sess.run([shared_order, shared_seed, scale], {order: np.random.RandomState(r).permutation(6)})
    sess.run(sync_a)
    np.savez(os.path.join(sys.argv[1], f"broadcast_values-rank{r}.npz"), order=got[0], seed=got[1], scale=got[2],
             scale_dtype=str(got[2].dtype), a=sess.run(a), c=sess.run(c))
