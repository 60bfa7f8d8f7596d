"""The intra-host all-reduce of opencl ranks (kernels/opencl/collective.py): under `mpiexec -n 2`, both ranks on PoCL's
one device, every rank on one host, each bucket goes through an MPI-3 shared-memory window and the devices sum it.
That path is the one taken by default, the ranks' weights stay bit-identical, and they equal, bit for bit, the same
steps through pinned memory (TFPLUS_ALLREDUCE_SHM=pinned), moved on by the communication thread instead of the main
thread when running ahead (TFPLUS_ALLREDUCE_POLL=0) and summed by MPI_Allreduce (TFPLUS_ALLREDUCE_SHM=0: for two ranks
either sum is a + b, times the same float32 scale); a bad TFPLUS_ALLREDUCE_SHM is refused by name."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("mpi4py", reason="the mpi extra is not installed: pip install -e '.[mpi]'")
pytest.importorskip("pyopencl", reason="the opencl device needs pyopencl")

from ranks import MPIEXEC

# One thread per process (two ranks share the CI's two cores).
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), TFPLUS_NUM_THREADS="1",
           TFPLUS_WORKERS="1")

# Trains a small conv net 5 steps on each rank's own batches, through buckets of several gradients and of one
# (bucket_bytes: the filter and its bias apart, the dense layer's two), the step replayed from its fourth run; first
# on the shared-memory path (the default here), then through pinned memory (TFPLUS_ALLREDUCE_SHM=pinned), then with
# the communication thread moving the exchanges on (TFPLUS_ALLREDUCE_POLL=0), then on MPI_Allreduce's (what
# TFPLUS_ALLREDUCE_SHM=0 sets at the first start), every rank writing its weights' hash, how many windows each path
# made and how often the communication thread woke to a file of its own.
SCRIPT = """
import hashlib, json, os, sys, numpy as np, tfplus as tf, tfplus.distributed as dist
from tfplus.kernels.numpy.collective import reducer
dist.init()
out = {}
for path in ("shm", "pinned", "thread", "mpi"):
    reducer.staged = path == "pinned"  # what TFPLUS_ALLREDUCE_SHM=pinned sets
    os.environ["TFPLUS_ALLREDUCE_POLL"] = str(int(path != "thread"))  # read by each start
    wakes = reducer.wakes
    if path == "mpi":
        reducer.shared = 0
    tf.reset_default_graph()
    tf.set_random_seed(3)
    x = tf.placeholder(tf.float32, [None, 8, 8, 3])
    y = tf.placeholder(tf.int64, [None])
    h = tf.layers.conv2d(x, 4, 3, activation=tf.nn.relu, name="conv")
    logits = tf.layers.dense(tf.reshape(h, [-1, 6 * 6 * 4]), 4, name="fc")
    loss = tf.losses.sparse_softmax_cross_entropy(y, logits)
    train = dist.DistributedOptimizer(tf.train.MomentumOptimizer(0.1, 0.9), bucket_bytes=(432, 16, 4096)).minimize(loss)
    rng = np.random.default_rng(dist.rank())
    with tf.Session(device="opencl:0") as sess:
        sess.run(tf.global_variables_initializer())
        dist.broadcast_global_variables(0, sess)
        for _ in range(5):
            asked = dist.max_over_ranks_later(dist.rank())  # as the trainer's signal check, around each step
            sess.run(train, {x: rng.standard_normal((4, 8, 8, 3)).astype(np.float32), y: rng.integers(0, 4, 4)})
            assert asked() == dist.size() - 1
        weights = sess.run(tf.trainable_variables())
    out[path] = hashlib.sha256(b"".join(w.tobytes() for w in weights)).hexdigest()
    out[path + " windows"] = len(reducer.windows)
    out[path + " wakes"] = reducer.wakes - wakes  # the communication thread's returns to Python
with open(os.path.join(sys.argv[1], f"rank{dist.rank()}.json"), "w") as f:  # the ranks' stdout may interleave
    json.dump(out, f)
"""


# Three ranks: a sum whose order matters (MPI's may differ from the devices' rank order), the same on every rank.
@pytest.mark.parametrize("n,runahead", [(2, "0"), (2, "1"), (3, "1")])
def test_ranks_sum_on_their_devices_through_shared_memory_to_equal_weights(tmp_path, n, runahead):
    env = dict(ENV, TFPLUS_ALLREDUCE_RUNAHEAD=runahead)
    run = subprocess.run([str(MPIEXEC), "-n", str(n), sys.executable, "-c", SCRIPT, str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(n)]
    for got in ranks:
        # The first three sessions made a window per bucket (3 each); the last, on MPI_Allreduce's path, none more.
        assert [got[p + " windows"] for p in ("shm", "pinned", "thread", "mpi")] == [3, 6, 9, 9], got
        assert got["shm"] == got["pinned"] == got["thread"], got
        # The main thread moves the exchanges on (TFPLUS_ALLREDUCE_POLL=1, a CPU device's default): the communication
        # thread never woke for them; with POLL=0 it did.
        assert (got["shm wakes"], got["pinned wakes"]) == (0, 0) and got["thread wakes"] > 0, got
        if n == 2:
            assert got["shm"] == got["mpi"], got  # the devices' sums equal MPI's bit for bit
    assert len({got["shm"] for got in ranks}) == 1, ranks  # every rank the same weights


@pytest.mark.parametrize("call,name", [("shared_ranks()", "SHM"), ("polling(False)", "POLL")])
def test_a_bad_switch_is_refused_by_name(call, name):
    run = subprocess.run([sys.executable, "-c", f"from tfplus.kernels.numpy import collective\ncollective.{call}"],
                         env=dict(ENV, **{f"TFPLUS_ALLREDUCE_{name}": "yes"}), capture_output=True, text=True,
                         timeout=60)
    assert run.returncode != 0 and f"TFPLUS_ALLREDUCE_{name}='yes': give 1" in run.stderr, run.stderr


# Rank 0 alone reads the weights after a step that ran ahead (as it does to save a checkpoint): that read waits for the
# step's exchanges, whose barrier waits for rank 1, which has gone on to tfplus.distributed.barrier(); the barrier
# first finishes the exchanges the main thread moves on, or the two ranks would wait for each other.
ASYMMETRIC = """
import os, sys, numpy as np, tfplus as tf, tfplus.distributed as dist
dist.init()
x = tf.placeholder(tf.float32, [None, 6])
w = tf.Variable(tf.ones([6, 3]))
loss = tf.reduce_mean(tf.square(tf.matmul(x, w)))
train = dist.DistributedOptimizer(tf.train.GradientDescentOptimizer(0.1)).minimize(loss)
rng = np.random.default_rng(dist.rank())
with tf.Session(device="opencl:0") as sess:
    sess.run(tf.global_variables_initializer())
    for step in range(8):
        sess.run(train, {x: rng.standard_normal((4, 6)).astype(np.float32)})
        if step == 5:
            if dist.rank() == 0:
                sess.run(w)
            dist.barrier()
    np.save(os.path.join(sys.argv[1], f"rank{dist.rank()}.npy"), sess.run(w))
"""


def test_a_rank_alone_waiting_for_the_exchanges_does_not_hold_up_a_barrier(tmp_path):
    env = dict(ENV, TFPLUS_ALLREDUCE_RUNAHEAD="1", TFPLUS_ALLREDUCE_TIMEOUT="20")
    run = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, "-c", ASYMMETRIC, str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=90)
    assert run.returncode == 0, run.stdout + run.stderr
    assert np.array_equal(np.load(tmp_path / "rank0.npy"), np.load(tmp_path / "rank1.npy"))
