# Rank 0 saves with tf.train.Saver; later every rank restores the checkpoint and they train on equally.
import os
import sys

import numpy as np

import tfplus as tf
import tfplus.distributed as hvd

hvd.init()
out = sys.argv[1]
ckpt_dir = os.path.join(out, "save_restore_ckpt")
GLOBAL = 4
per = GLOBAL // hvd.size()
rng = np.random.RandomState(12)
X = rng.randn(6 * GLOBAL, 3).astype(np.float32)


def build():
    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [None, 3])
    tf.set_random_seed(hvd.rank())
    w = tf.get_variable("w", [3, 2])
    step = tf.train.get_or_create_global_step()
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - 1))
    return x, w, step, hvd.DistributedOptimizer(tf.train.AdamOptimizer(0.05)).minimize(loss, global_step=step)


def train(sess, x, train_op, first, steps):
    for i in range(first, first + steps):
        lo = i * GLOBAL + hvd.rank() * per
        sess.run(train_op, {x: X[lo:lo + per]})


x, w, step, train_op = build()
bcast = hvd.broadcast_global_variables(0)
saver = tf.train.Saver()
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    sess.run(bcast)
    train(sess, x, train_op, 0, 3)
    if hvd.rank() == 0:
        saved = saver.save(sess, os.path.join(ckpt_dir, "model.ckpt"), global_step=step)
    at_save = sess.run(w)
hvd.barrier()  # the checkpoint is written before any rank reads it
x, w, step, train_op = build()
saver = tf.train.Saver()
with tf.Session() as sess:
    saver.restore(sess, tf.train.latest_checkpoint(ckpt_dir))
    restored, restored_step = sess.run([w, step])
    train(sess, x, train_op, 3, 3)
    np.savez(os.path.join(out, f"save_restore-rank{hvd.rank()}.npz"), at_save=at_save, restored=restored,
             restored_step=restored_step, w=sess.run(w), step=sess.run(step))
