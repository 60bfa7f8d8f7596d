# The loss and the accuracy averaged over the ranks with hvd.allreduce, fetched with the step and in evaluation.
import os
import sys

import numpy as np

import tfplus as tf
import tfplus.distributed as hvd

hvd.init()
GLOBAL, STEPS = 8, 3
per = GLOBAL // hvd.size()
rng = np.random.RandomState(8)
X = rng.randn(STEPS * GLOBAL, 5).astype(np.float32)
Y = rng.randint(0, 3, len(X))
x = tf.placeholder(tf.float32, [None, 5])
y = tf.placeholder(tf.int64, [None])
tf.set_random_seed(0)
logits = tf.layers.dense(x, 3)
loss = tf.losses.sparse_softmax_cross_entropy(y, logits)
accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.float32))
correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.int32))
avg_loss = hvd.allreduce(loss)
avg_accuracy = hvd.allreduce(accuracy, average=True)
total_correct = hvd.allreduce(correct, op=hvd.Sum)
const_sum = hvd.allreduce(np.array([1.0, 2.0], np.float32), op=hvd.Sum)
train_op = hvd.DistributedOptimizer(tf.train.GradientDescentOptimizer(0.5)).minimize(loss)
losses, evals = [], []
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    for i in range(STEPS):
        lo = i * GLOBAL + hvd.rank() * per
        feed = {x: X[lo:lo + per], y: Y[lo:lo + per]}
        losses.append(sess.run([train_op, avg_loss, loss], feed)[1:])
    feed = {x: X[hvd.rank() * per:(hvd.rank() + 1) * per], y: Y[hvd.rank() * per:(hvd.rank() + 1) * per]}
    evals = sess.run([avg_accuracy, total_correct, accuracy, correct, const_sum], feed)
    np.savez(os.path.join(sys.argv[1], f"metrics-rank{hvd.rank()}.npz"), losses=np.array(losses),
             avg_accuracy=evals[0], total_correct=evals[1], accuracy=evals[2], correct=evals[3], const_sum=evals[4],
             total_correct_dtype=str(np.asarray(evals[1]).dtype))
