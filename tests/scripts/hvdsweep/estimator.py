# tf.estimator with a model_fn that wraps its optimizer, the broadcast hook in train(hooks=...), model_dir on rank 0.
import os
import sys

import numpy as np

import tfplus as tf
import tfplus.distributed as hvd

hvd.init()
GLOBAL, STEPS = 8, 4
per = GLOBAL // hvd.size()
rng = np.random.RandomState(10)
X = rng.randn(STEPS * GLOBAL, 4).astype(np.float32)
Y = rng.randint(0, 3, len(X)).astype(np.int32)
mine = np.concatenate([np.arange(i * GLOBAL + hvd.rank() * per, i * GLOBAL + (hvd.rank() + 1) * per)
                       for i in range(STEPS)])


def model_fn(features, labels, mode):
    logits = tf.layers.dense(features["x"], 3, name="dense")
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    opt = hvd.DistributedOptimizer(tf.train.GradientDescentOptimizer(0.2))
    train_op = opt.minimize(loss, global_step=tf.train.get_or_create_global_step())
    return tf.estimator.EstimatorSpec(mode=mode, loss=loss, train_op=train_op)


model_dir = os.path.join(sys.argv[1], "estimator_model") if hvd.rank() == 0 else None
config = tf.estimator.RunConfig(model_dir=model_dir, tf_random_seed=hvd.rank())  # the broadcast makes them rank 0's
est = tf.estimator.Estimator(model_fn=model_fn, config=config)
input_fn = tf.estimator.inputs.numpy_input_fn({"x": X[mine]}, Y[mine], batch_size=per, num_epochs=1, shuffle=False)
est.train(input_fn, steps=STEPS, hooks=[hvd.BroadcastGlobalVariablesHook(0)])
np.savez(os.path.join(sys.argv[1], f"estimator-rank{hvd.rank()}.npz"),
         kernel=est.get_variable_value("dense/kernel"), bias=est.get_variable_value("dense/bias"))
