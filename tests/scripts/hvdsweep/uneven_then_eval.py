# One rank runs a training step fewer, then both evaluate with hvd.allreduce: the shorter rank's evaluation meets
# the other's last training step.
import tfplus as tf
import tfplus.distributed as hvd

hvd.init()
w = tf.Variable(1.0)
loss = w * w
train_op = hvd.DistributedOptimizer(tf.train.GradientDescentOptimizer(0.1)).minimize(loss)
average_loss = hvd.allreduce(loss)
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    for _ in range(3 - hvd.rank()):
        sess.run(train_op)
    print("rank", hvd.rank(), "evaluated", sess.run(average_loss))
