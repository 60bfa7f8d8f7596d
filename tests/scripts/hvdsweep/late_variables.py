# broadcast_global_variables built before a variable exists: the later variable is not in it (as Horovod's).
import os
import sys

import numpy as np

import tfplus as tf
import tfplus.distributed as hvd

hvd.init()
r = hvd.rank()
early = tf.Variable(tf.fill([2], float(r)), name="early")
bcast = hvd.broadcast_global_variables(0)
late = tf.Variable(tf.fill([2], float(r)), name="late")
late_bcast = hvd.broadcast_global_variables(0)
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    sess.run(bcast)
    after_first = sess.run([early, late])
    sess.run(late_bcast)
    after_second = sess.run([early, late])
np.savez(os.path.join(sys.argv[1], f"late_variables-rank{r}.npz"), after_first=after_first, after_second=after_second)
