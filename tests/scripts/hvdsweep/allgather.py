# hvd.allgather of uneven first dimensions (each rank's last, short batch of predictions), several dtypes.
import os
import sys

import numpy as np

import tfplus as tf
import tfplus.distributed as hvd

hvd.init()
r = hvd.rank()
preds = tf.placeholder(tf.float32, [None, 2, 3])
labels = tf.placeholder(tf.int64, [None])
flags = tf.placeholder(tf.bool, [None])
halves = tf.placeholder(tf.float64, [None])
gathered = [hvd.allgather(preds), hvd.allgather(labels), hvd.allgather(flags), hvd.allgather(halves, name="h")]
n = 2 * r + 1 if r != 1 else 0  # rank 1 has nothing left
with tf.Session() as sess:
    got = sess.run(gathered, {preds: np.full((n, 2, 3), r, np.float32) + np.arange(n)[:, None, None],
                              labels: np.arange(n) + 10 * r, flags: np.arange(n) % 2 == 0,
                              halves: np.arange(n) / 3.0 + r})
np.savez(os.path.join(sys.argv[1], f"allgather-rank{r}.npz"), preds=got[0], labels=got[1], flags=got[2],
         halves=got[3], dtypes=[str(g.dtype) for g in got])
