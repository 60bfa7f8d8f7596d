# A dataset sharded over the ranks whose shards differ by one batch: one rank has a step more than the other.
import tfplus as tf
import tfplus.distributed as hvd

hvd.init()
dataset = tf.data.Dataset.range(9).shard(hvd.size(), hvd.rank()).batch(1)
value = dataset.make_one_shot_iterator().get_next()
w = tf.Variable(1.0)
loss = tf.reduce_sum(tf.cast(value, tf.float32) * w)
train_op = hvd.DistributedOptimizer(tf.train.GradientDescentOptimizer(0.01)).minimize(loss)
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    try:
        while True:
            sess.run(train_op)
    except tf.errors.OutOfRangeError:
        pass
print("rank", hvd.rank(), "done")
