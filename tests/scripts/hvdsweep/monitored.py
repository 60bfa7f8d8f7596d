# Horovod's MonitoredTrainingSession recipe: the broadcast hook, StopAtStepHook(last_step // size), a checkpoint
# directory on rank 0 only, then a second run that resumes from it.
import os
import sys

import numpy as np

import tfplus as tf
import tfplus.distributed as hvd

hvd.init()
out = sys.argv[1]
GLOBAL = 8
per = GLOBAL // hvd.size()
rng = np.random.RandomState(9)
X = rng.randn(16 * GLOBAL, 5).astype(np.float32)
Y = rng.randint(0, 3, len(X))
checkpoint_dir = os.path.join(out, "monitored_ckpt") if hvd.rank() == 0 else None
seen = []
for last_step in (3, 5):
    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [None, 5])
    y = tf.placeholder(tf.int64, [None])
    tf.set_random_seed(hvd.rank())
    logits = tf.layers.dense(tf.layers.dense(x, 6, tf.nn.tanh), 3)
    loss = tf.losses.sparse_softmax_cross_entropy(y, logits)
    global_step = tf.train.get_or_create_global_step()
    opt = hvd.DistributedOptimizer(tf.train.AdamOptimizer(0.02))
    train_op = opt.minimize(loss, global_step=global_step)
    final = tf.train.FinalOpsHook({v.op.name.replace("/", "."): v for v in tf.trainable_variables()})
    hooks = [hvd.BroadcastGlobalVariablesHook(0), tf.train.StopAtStepHook(last_step=last_step),
             tf.train.LoggingTensorHook(tensors={"step": global_step, "loss": loss}, every_n_iter=2), final]
    with tf.train.MonitoredTrainingSession(checkpoint_dir=checkpoint_dir, hooks=hooks,
                                           save_checkpoint_steps=2) as mon_sess:
        while not mon_sess.should_stop():
            i = len(seen)
            lo = i * GLOBAL + hvd.rank() * per
            seen.append(mon_sess.run([train_op, global_step], {x: X[lo:lo + per], y: Y[lo:lo + per]})[1])
np.savez(os.path.join(out, f"monitored-rank{hvd.rank()}.npz"), seen=np.array(seen), **final.final_ops_values)
