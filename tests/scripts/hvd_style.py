"""Horovod-shaped TF1 training written as its users write it, for tests/engine/test_distributed_offpath.py, under
`mpiexec -n 2` or alone.

    hvd_style.py OUT single|distributed

For each optimizer of OPTIMIZERS: a model with an embedding lookup, a bias, a scalar, a float64 variable, a variable
the loss does not use (its gradient is None) and a non-trainable variable the optimizer is given anyway;
compute_gradients and apply_gradients called apart; the broadcast op built before the variables are initialized
and run after. Then a batch norm model (each rank keeps its own moving statistics, as Horovod's). Rank r of N
trains on rows [r*B/N, (r+1)*B/N) of each global batch of B, its weights first drawn from seed r (the broadcast
makes them rank 0's); rank 0 alone saves a checkpoint with tf.train.Saver. Each process writes its variables to
OUT/<case>-rank<r>.npz.
"""
import os
import sys

import numpy as np

import tfplus as tf
import tfplus.distributed as hvd

out, mode = sys.argv[1], sys.argv[2]
distributed = mode == "distributed"
if distributed:
    hvd.init()
rank, n = (hvd.rank(), hvd.size()) if distributed else (0, 1)
BATCH, STEPS = 8, 3
rng = np.random.RandomState(0)
X = rng.randn(STEPS * BATCH, 5).astype(np.float32)
IDS = rng.randint(0, 7, STEPS * BATCH).astype(np.int64)
Y = rng.randint(0, 3, STEPS * BATCH).astype(np.int64)
OPTIMIZERS = {"sgd": lambda: tf.train.GradientDescentOptimizer(0.1),
              "momentum": lambda: tf.train.MomentumOptimizer(0.1, 0.9),
              "adam": lambda: tf.train.AdamOptimizer(0.01),
              "rmsprop": lambda: tf.train.RMSPropOptimizer(0.01),
              "adagrad": lambda: tf.train.AdagradOptimizer(0.1)}


def rows(step: int) -> slice:
    m = BATCH // n
    return slice(step * BATCH + rank * m, step * BATCH + (rank + 1) * m)


def save(case: str, sess) -> None:
    np.savez(os.path.join(out, f"{case}-rank{rank}.npz"), **{v.op.name: sess.run(v) for v in tf.global_variables()})


for case, make in OPTIMIZERS.items():
    with tf.Graph().as_default():
        tf.set_random_seed(rank)
        x = tf.placeholder(tf.float32, [None, 5])
        ids = tf.placeholder(tf.int64, [None])
        y = tf.placeholder(tf.int64, [None])
        emb = tf.Variable(tf.random_normal([7, 4]), name="emb")
        w = tf.Variable(tf.random_normal([9, 3]), name="w")
        b = tf.Variable(tf.zeros([3]), name="b")
        scale = tf.Variable(1.5, name="scale")
        temperature = tf.Variable(np.float64(1.25), name="temperature")
        tf.Variable(tf.ones([2]), name="unused")
        frozen = tf.Variable(tf.random_normal([3]), trainable=False, name="frozen")
        h = tf.concat([x, tf.nn.embedding_lookup(emb, ids)], 1)
        logits = (tf.matmul(h, w) * scale + b + frozen) * tf.cast(temperature, tf.float32)
        loss = tf.losses.sparse_softmax_cross_entropy(y, logits)
        opt = make()
        if distributed:
            opt = hvd.DistributedOptimizer(opt, sparse_as_dense=True)  # as Horovod scripts with embeddings do
        step = tf.train.get_or_create_global_step()
        grads = opt.compute_gradients(loss, var_list=tf.trainable_variables() + [frozen])
        if not distributed:  # the embedding's gradient dense, as sparse_as_dense makes it: every row updated
            grads = [(tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g, v) for g, v in grads]
        train = opt.apply_gradients(grads, global_step=step)
        saver = tf.train.Saver()
        with tf.Session() as sess:
            bcast = hvd.broadcast_global_variables(0) if distributed else tf.no_op()  # before initialization
            sess.run(tf.global_variables_initializer())
            sess.run(bcast)
            for i in range(STEPS):
                sess.run(train, {x: X[rows(i)], ids: IDS[rows(i)], y: Y[rows(i)]})
            if rank == 0:
                saver.save(sess, os.path.join(out, case, "model.ckpt"), global_step=step)
            save(case, sess)

with tf.Graph().as_default():
    tf.set_random_seed(rank)
    x = tf.placeholder(tf.float32, [None, 5])
    y = tf.placeholder(tf.int64, [None])
    normed = tf.layers.batch_normalization(x, momentum=0.9, training=True, name="bn")
    loss = tf.losses.sparse_softmax_cross_entropy(y, tf.layers.dense(normed, 3, name="fc"))
    opt = tf.train.GradientDescentOptimizer(0.1)
    with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
        train = (hvd.DistributedOptimizer(opt) if distributed else opt).minimize(loss)
    hooks = [hvd.BroadcastGlobalVariablesHook(0)] if distributed else []
    with tf.train.MonitoredTrainingSession(hooks=hooks, save_summaries_steps=None,
                                           log_step_count_steps=None) as sess:
        for i in range(STEPS):
            sess.run(train, {x: X[rows(i)], y: Y[rows(i)]})
        np.savez(os.path.join(out, f"batchnorm-rank{rank}.npz"),
                 **{v.op.name: sess.run(v) for v in tf.global_variables()})

if distributed:  # Horovod's op= spelling: the ranks' sum and mean of (rank + 1)
    with tf.Graph().as_default(), tf.Session() as sess:
        value = tf.constant([rank + 1.0])
        total, mean = sess.run([hvd.allreduce(value, op=hvd.Sum), hvd.allreduce(value, op=hvd.Average)])
    np.savez(os.path.join(out, f"allreduce-rank{rank}.npz"), sum=total, mean=mean, initialized=hvd.is_initialized())
