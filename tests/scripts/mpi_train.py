"""A small data-parallel training run for tests/engine/test_distributed.py, under `mpiexec -n N` or alone.

    mpi_train.py OUT STEPS BATCH DEVICE single|distributed [DIE_RANK DIE_STEP]

single: one process trains on the whole batch of each step. distributed: rank r of N trains on rows
[r*B/N, (r+1)*B/N) of each global batch with DistributedOptimizer, its weights first drawn from seed r (then
BroadcastGlobalVariablesHook makes them rank 0's), and only rank 0 writes checkpoints. Each process writes its
final variables to OUT/rank<r>.npz. With DIE_RANK and DIE_STEP, that rank kills itself (SIGKILL) before that step.
"""
import os
import signal
import sys

import numpy as np

import tfplus as tf
import tfplus.distributed as dist

out, steps, batch, device, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
die_rank, die_step = (int(sys.argv[6]), int(sys.argv[7])) if len(sys.argv) > 7 else (None, None)
distributed = mode == "distributed"
if distributed:
    dist.init()
rank, n = (dist.rank(), dist.size()) if distributed else (0, 1)

rng = np.random.RandomState(0)
images = rng.randn(steps * batch, 8, 8, 3).astype(np.float32)
labels = rng.randint(0, 4, steps * batch).astype(np.int64)

tf.set_random_seed(rank)  # ranks draw different weights: the broadcast must make them equal
x = tf.placeholder(tf.float32, [None, 8, 8, 3])
y = tf.placeholder(tf.int64, [None])
h = tf.layers.conv2d(x, 4, 3, activation=tf.nn.relu, name="conv")
logits = tf.layers.dense(tf.reshape(h, [-1, 6 * 6 * 4]), 4, name="fc")
loss = tf.losses.sparse_softmax_cross_entropy(y, logits)
opt = tf.train.MomentumOptimizer(0.1, 0.9)
if distributed:
    opt = dist.DistributedOptimizer(opt)
step = tf.train.get_or_create_global_step()
train_op = opt.minimize(loss, global_step=step)

hooks = [dist.BroadcastGlobalVariablesHook(0)] if distributed else []
ckpt = os.path.join(out, "ckpt") if rank == 0 else None
with tf.train.MonitoredTrainingSession(checkpoint_dir=ckpt, hooks=hooks, save_checkpoint_steps=steps,
                                       save_summaries_steps=None, log_step_count_steps=None,
                                       device=device) as sess:
    for i in range(steps):
        if rank == die_rank and i == die_step:
            os.kill(os.getpid(), signal.SIGKILL)
        m = batch // n
        rows = slice(i * batch + rank * m, i * batch + (rank + 1) * m)
        sess.run(train_op, {x: images[rows], y: labels[rows]})
    final = {v.op.name: sess.run(v) for v in tf.global_variables()}
np.savez(os.path.join(out, f"rank{rank}.npz"), **final)
