"""A TF1 training script in the style of the TensorFlow 1 tutorials, with only the import line changed:
flags, logging, gfile, tf.layers, tf.losses, RMSProp, summaries, a saver, an EMA, gradient clipping."""
import numpy as np

import tfplus as tf

flags = tf.app.flags
flags.DEFINE_integer("steps", 30, "training steps")
flags.DEFINE_float("learning_rate", 0.01, "RMSProp learning rate")
flags.DEFINE_string("logdir", "/tmp/tf1_mlp", "summaries and checkpoints")
flags.DEFINE_boolean("clip", True, "clip gradients by global norm")
FLAGS = flags.FLAGS


def main(argv):
    tf.logging.set_verbosity(tf.logging.INFO)
    if tf.gfile.Exists(FLAGS.logdir):
        tf.gfile.DeleteRecursively(FLAGS.logdir)
    tf.gfile.MakeDirs(FLAGS.logdir)
    rng = np.random.RandomState(0)
    data = rng.randn(64, 10).astype(np.float32)
    labels = (data[:, :3].sum(1) > 0).astype(np.int64)

    tf.set_random_seed(0)  # the initial weights: the loss check below holds for this draw
    x = tf.placeholder("float", [None, 10], name="x")  # TF1 reads the string "float" as float32
    y = tf.placeholder(tf.int64, [None], name="y")
    keep = tf.placeholder_with_default(1.0, [], name="keep")
    h = tf.layers.dense(x, 16, activation=tf.nn.relu)
    h = tf.nn.dropout(h, keep_prob=keep)
    logits = tf.layers.dense(h, 2)
    tf.losses.sparse_softmax_cross_entropy(labels=y, logits=logits)
    loss = tf.losses.get_total_loss()
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.float32))
    global_step = tf.train.get_or_create_global_step()
    opt = tf.train.RMSPropOptimizer(FLAGS.learning_rate)
    grads, variables = zip(*opt.compute_gradients(loss))
    if FLAGS.clip:
        grads, _ = tf.clip_by_global_norm(grads, 5.0)
    step = opt.apply_gradients(zip(grads, variables), global_step=global_step)
    ema = tf.train.ExponentialMovingAverage(0.9)
    with tf.control_dependencies([step]):
        train_op = ema.apply(tf.trainable_variables())
    tf.summary.scalar("loss", loss)
    tf.summary.scalar("accuracy", accuracy)
    tf.summary.histogram("logits", logits)
    merged = tf.summary.merge_all()
    saver = tf.train.Saver()

    with tf.Session() as sess:
        writer = tf.summary.FileWriter(FLAGS.logdir, sess.graph)
        sess.run(tf.global_variables_initializer())
        first = None
        for i in range(FLAGS.steps):
            summary, l, _ = sess.run([merged, loss, train_op], {x: data, y: labels, keep: 0.9})
            writer.add_summary(summary, i)
            first = l if first is None else first
            if i % 10 == 0:
                tf.logging.info("step %d loss %.4f", i, l)
        final = sess.run(loss, {x: data, y: labels})
        saver.save(sess, FLAGS.logdir + "/model.ckpt", global_step=global_step)
        writer.close()
    print("RESULT first=%.6f final=%.6f argv=%s" % (first, final, argv[1:]))


if __name__ == "__main__":
    tf.app.run()
