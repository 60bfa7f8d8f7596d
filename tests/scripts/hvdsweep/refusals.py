# What Horovod has and tfplus does not: op=hvd.Adasum, fp16 compression, local gradient accumulation, join. Each
# is refused at once, by name, on every rank.
import os
import sys

import numpy as np

import tfplus as tf
import tfplus.distributed as hvd

hvd.init()
x = tf.Variable([1.0, 2.0])
loss = tf.reduce_sum(x * x)
refused = {}
for what, make in {
        "adasum": lambda: hvd.DistributedOptimizer(tf.train.GradientDescentOptimizer(0.1), op=hvd.Adasum),
        "adasum_allreduce": lambda: hvd.allreduce(loss, op=hvd.Adasum),
        "fp16": lambda: hvd.DistributedOptimizer(tf.train.AdamOptimizer(0.1), compression=hvd.Compression.fp16),
        "passes": lambda: hvd.DistributedOptimizer(tf.train.AdamOptimizer(0.1), backward_passes_per_step=4),
        "join": hvd.join}.items():
    try:
        make()
        refused[what] = ""
    except (NotImplementedError, ValueError) as e:
        refused[what] = f"{type(e).__name__}: {e}"
np.savez(os.path.join(sys.argv[1], f"refusals-rank{hvd.rank()}.npz"), **refused)
