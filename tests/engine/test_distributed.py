"""tfplus.distributed under `mpiexec -n 2` (the mpich wheel's, beside this Python): two ranks at half the batch
train to one process's weights at the whole batch, the broadcast makes ranks equal, rank 0 alone writes
checkpoints, and a rank that dies or raises ends the job with an error instead of a hang."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mpi4py", reason="the mpi extra is not installed: pip install -e '.[mpi]'")

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "mpi_train.py"
MPIEXEC = Path(sys.executable).parent / "mpiexec"  # the mpich wheel installs it beside the interpreter
# One thread and no forked workers per process: two ranks share the CI's two cores.
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), TFPLUS_NUM_THREADS="1",
           TFPLUS_WORKERS="1")


def _mpiexec(*args, n=2, timeout=120, env=ENV):
    if not MPIEXEC.exists():
        pytest.fail(f"{MPIEXEC} is missing: the mpich wheel (the mpi extra) brings it")
    return subprocess.run([str(MPIEXEC), "-n", str(n), sys.executable, *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=timeout)


def _weights(path):
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


# (device, TFPLUS_ALLREDUCE_BUCKET): the default (the small model's gradients in one bucket, overlapped with nothing),
# a bucket per layer (the dense layer's all-reduce runs while the convolution's gradients are computed), no
# overlap (one MpiAllreduce after the backward pass), and a schedule from the input side (4 buckets: the filter, the
# bias, the dense weights, the dense bias). On opencl, 6 steps: the planned step replays from the fourth.
@pytest.mark.parametrize("device,bucket", [("cpu", ""), ("cpu", "64"), ("cpu", "0"), ("cpu", "100,1KB"),
                                           ("opencl", "64")])
def test_two_ranks_at_half_the_batch_train_as_one_process_at_the_whole_batch(tmp_path, device, bucket):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    steps = 6 if device == "opencl" else 4
    subprocess.run([sys.executable, *map(str, (SCRIPT, one, steps, 16, device, "single"))], env=ENV, check=True,
                   timeout=120)
    run = _mpiexec(SCRIPT, two, steps, 16, device, "distributed",
                   env=dict(ENV, TFPLUS_ALLREDUCE_BUCKET=bucket, TFPLUS_ALLREDUCE_TRACE="1"))
    assert run.returncode == 0, run.stdout + run.stderr
    n = {"64": 2, "100,1KB": 4}.get(bucket)
    if n:  # each rank reports where each of its buckets' time went, the steps' pace, the host's path between steps
        assert run.stderr.count("tfplus all-reduce bucket ") == 2 * n and "step to step" in run.stderr, run.stderr
        for r in (0, 1):  # from the last wait (on opencl through its copy back's enqueue) to the next first start
            between = [line for line in run.stderr.splitlines()
                       if f"rank {r}: the host between steps, median / mean ms: bucket {n} waited -> " in line]
            assert len(between) == 1 and "-> bucket 1 started" in between[0], run.stderr
            assert (f"bucket {n} copy back queued -> " in between[0]) == (device == "opencl"), between
    want, got0, got1 = _weights(one / "rank0.npz"), _weights(two / "rank0.npz"), _weights(two / "rank1.npz")
    assert set(got0) == set(want) and int(got0["global_step"]) == steps
    for name in want:
        np.testing.assert_allclose(got0[name], want[name], rtol=0, atol=1e-5, err_msg=name)
        np.testing.assert_array_equal(got1[name], got0[name], err_msg=name)  # same update on every rank
    # Rank 0 alone writes checkpoints (rank 1 was given no checkpoint_dir).
    assert (two / "ckpt" / f"model.ckpt-{steps}.index").exists() and not (two / "rank1").exists()


# Each rank writes what it holds to its own file (their shared stdout may interleave the lines).
BROADCAST = """
import os, sys, numpy as np, tfplus as tf, tfplus.distributed as dist
dist.init()
v = tf.Variable(np.full((2, 3), dist.rank(), np.float32))
s = tf.Variable(10 * dist.rank(), dtype=tf.int64)
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    dist.broadcast_global_variables(1, sess)
    np.savez(os.path.join(sys.argv[1], f"rank{dist.rank()}.npz"), v=sess.run(v), s=sess.run(s))
"""


def test_broadcast_sets_every_rank_to_the_roots_variables(tmp_path):
    run = _mpiexec("-c", BROADCAST, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    for r in (0, 1):
        got = _weights(tmp_path / f"rank{r}.npz")
        np.testing.assert_array_equal(got["v"], np.ones((2, 3), np.float32))
        assert int(got["s"]) == 10


def test_a_killed_rank_ends_the_job_with_an_error(tmp_path):
    run = _mpiexec(SCRIPT, tmp_path, 6, 16, "cpu", "distributed", 1, 2, timeout=60)
    assert run.returncode != 0
    assert "BAD TERMINATION" in run.stdout + run.stderr and "Killed" in run.stdout + run.stderr
    assert not (tmp_path / "rank0.npz").exists()  # rank 0 did not finish alone


RAISES = """
import numpy as np, tfplus as tf, tfplus.distributed as dist
dist.init()
if dist.rank() == 1:
    raise ValueError("rank 1 failed on purpose")
x = dist.allreduce(tf.constant(np.ones(3, np.float32)))  # rank 0 waits here for rank 1
with tf.Session() as sess:
    sess.run(x)
"""


def test_an_exception_on_one_rank_aborts_the_job_instead_of_hanging():
    run = _mpiexec("-c", RAISES, timeout=60)
    assert run.returncode != 0
    assert "rank 1 failed on purpose" in run.stderr


# Each rank starts the exchange, then blocks in a collective of its own: the exchange waited for nothing.
LATER = """
import numpy as np, tfplus.distributed as dist
dist.init()
result = dist.max_over_ranks_later(7 if dist.rank() == 1 else 3)
dist.barrier()
print(f"rank {dist.rank()}: {result()} {dist.max_over_ranks(dist.rank())}")
"""


def test_max_over_ranks_later_gives_every_rank_the_largest_value():
    run = _mpiexec("-c", LATER, timeout=60)
    assert run.returncode == 0, run.stderr
    # the two ranks share stdout: their lines may come out joined
    assert sorted(re.findall(r"rank \d: \d+ \d+", run.stdout)) == ["rank 0: 7 1", "rank 1: 7 1"], run.stdout


def test_a_schedule_cuts_small_buckets_from_the_first_layer_and_a_size_from_the_last():
    import tfplus as tf
    from tfplus.distributed import _bucket_sizes, _buckets
    shapes = {"c1w": [3, 3, 3, 32], "c1b": [32], "c2w": [3, 3, 32, 32], "c2b": [32], "fcw": [2048, 256], "fcb": [256]}
    with tf.Graph().as_default():
        pairs = [(tf.zeros(s), tf.Variable(tf.zeros(s), name=n)) for n, s in shapes.items()]
        names = {key: [[v.op.name for _, v in b] for b in _buckets(pairs, _bucket_sizes(key, "test"))]
                 for key in ("4KiB, 64KiB,1MiB", "1MiB")}
    # Listed in the order the backward pass computes them: the first layer's 3.5 KB come last, in a bucket alone.
    assert names["4KiB, 64KiB,1MiB"] == [["fcb"], ["fcw"], ["c2b", "c2w"], ["c1b", "c1w"]]
    assert names["1MiB"] == [["fcb", "fcw"], ["c2b", "c2w", "c1b", "c1w"]]
    with pytest.raises(ValueError, match=r"TFPLUS_ALLREDUCE_BUCKET '0,1MB': a schedule's bucket sizes are above 0"):
        _bucket_sizes("0,1MB", "TFPLUS_ALLREDUCE_BUCKET")


def test_the_api_refuses_to_build_before_init():
    import tfplus as tf
    from tfplus import distributed
    with pytest.raises(RuntimeError, match=r"call tfplus.distributed.init\(\)"):
        distributed.DistributedOptimizer(tf.train.GradientDescentOptimizer(0.1))


# One process (MPI's singleton: a job of one rank, its all-reduces built by TFPLUS_ALLREDUCE_ALONE=1) is enough to
# see what a step runs: a bucket per layer, 6 steps.
ORDER = """
import json, sys, numpy as np, tfplus as tf, tfplus.distributed as dist
dist.init()
x = tf.placeholder(tf.float32, [None, 8, 8, 3])
y = tf.placeholder(tf.int64, [None])
h = tf.layers.conv2d(x, 4, 3, activation=tf.nn.relu, name="conv")
logits = tf.layers.dense(tf.reshape(h, [-1, 6 * 6 * 4]), 4, name="fc")
loss = tf.losses.sparse_softmax_cross_entropy(y, logits)
train = dist.DistributedOptimizer(tf.train.MomentumOptimizer(0.1, 0.9), bucket_bytes=64).minimize(loss)
with tf.Session(device=sys.argv[1]) as sess:
    sess.run(tf.global_variables_initializer())
    for _ in range(6):
        sess.run(train, {x: np.ones((4, 8, 8, 3), np.float32), y: np.zeros(4, np.int64)})
    prog = next(p for s in sess.steps for p in s.programs if any(op.type == "MpiAllreduceStart" for op in p.order))
    print(json.dumps({"order": [op.type for op in prog.order],
                      "taped": [t.tape is not None for t in prog.tapes.values()]}))
"""


@pytest.mark.parametrize("device", ["cpu", "opencl"])
def test_a_buckets_all_reduce_starts_before_the_earlier_layers_gradients_and_the_step_replays(device):
    run = subprocess.run([sys.executable, "-c", ORDER, device], env=dict(ENV, TFPLUS_ALLREDUCE_ALONE="1"),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.splitlines()[-1])
    order = got["order"]
    starts = [i for i, t in enumerate(order) if t == "MpiAllreduceStart"]
    waits = [i for i, t in enumerate(order) if t == "MpiAllreduceWait"]
    assert len(starts) == len(waits) == 2
    # The dense layer's bucket is on its way before the convolution's filter gradient is computed; the step waits
    # for the sums only after the last bucket started.
    assert starts[0] < order.index("Conv2DBackpropFilter") < starts[1] < min(waits)
    if device == "opencl":
        assert got["taped"] == [True]  # the planned step replays its launches, the all-reduces' host work with them


# A world of one: DistributedOptimizer builds no collective op, and its step gives the wrapped optimizer's weights
# bit for bit (the bucket machinery cost an H200 step 1.6-1.9 ms with nothing to reduce: BENCHMARKS.md, stop 50).
ALONE = """
import json, sys, numpy as np, tfplus as tf, tfplus.distributed as dist
dist.init()
weights = {}
for wrap in (False, True):
    tf.reset_default_graph()
    tf.set_random_seed(3)
    x = tf.placeholder(tf.float32, [None, 8, 8, 3])
    y = tf.placeholder(tf.int64, [None])
    h = tf.layers.conv2d(x, 4, 3, activation=tf.nn.relu, name="conv")
    logits = tf.layers.dense(tf.reshape(h, [-1, 6 * 6 * 4]), 4, name="fc")
    loss = tf.losses.sparse_softmax_cross_entropy(y, logits)
    opt = tf.train.MomentumOptimizer(0.1, 0.9)
    train = (dist.DistributedOptimizer(opt, bucket_bytes=64) if wrap else opt).minimize(loss)
    ops = [op.type for op in tf.get_default_graph().get_operations() if op.type.startswith("Mpi")]
    rng = np.random.default_rng(0)
    with tf.Session(device=sys.argv[1]) as sess:
        sess.run(tf.global_variables_initializer())
        first = sess.run(tf.trainable_variables())
        for _ in range(5):
            sess.run(train, {x: rng.standard_normal((4, 8, 8, 3)).astype(np.float32), y: rng.integers(0, 4, 4)})
        weights[wrap] = sess.run(tf.trainable_variables())
print(json.dumps({"mpi_ops": ops, "equal": all(np.array_equal(a, b) for a, b in zip(weights[False], weights[True])),
                  "moved": all(not np.array_equal(a, b) for a, b in zip(first, weights[True]))}))
"""


@pytest.mark.parametrize("device", ["cpu", "opencl"])
def test_a_world_of_one_builds_no_all_reduce_and_trains_as_the_wrapped_optimizer(device):
    run = subprocess.run([sys.executable, "-c", ALONE, device], env=ENV, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.splitlines()[-1])
    assert got == {"mpi_ops": [], "equal": True, "moved": True}


# The buckets' all-reduces built in a world of one (TFPLUS_ALLREDUCE_ALONE=1), the conv kernel and bias each a bucket
# (copied straight from and into their buffers on opencl), the dense pair one (packed), weight decay on the kernels:
# the rewritten step is the plain one's plus a Start and a Wait a bucket (no packing ConcatV2 or
# SplitV, no Mul or AddN: the decay's term is added after the all-reduce and folded into the update as in one
# process; BENCHMARKS.md, mpib), and it trains to the plain step's weights bit for bit, whichever way opencl's waits
# run ahead (TFPLUS_ALLREDUCE_RUNAHEAD, argv[2]).
BUCKETED = """
import collections, json, os, sys, numpy as np, tfplus as tf, tfplus.distributed as dist
from tfplus.engine.rewrite import optimize
os.environ["TFPLUS_ALLREDUCE_RUNAHEAD"] = sys.argv[2]
dist.init()
weights, kinds = {}, {}
for wrap in (False, True):
    tf.reset_default_graph()
    tf.set_random_seed(3)
    x = tf.placeholder(tf.float32, [None, 8, 8, 3])
    y = tf.placeholder(tf.int64, [None])
    h = tf.layers.conv2d(x, 4, 3, activation=tf.nn.relu, name="conv")
    logits = tf.layers.dense(tf.reshape(h, [-1, 6 * 6 * 4]), 4, name="fc")
    kernels = [v for v in tf.trainable_variables() if "kernel" in v.name]
    loss = tf.losses.sparse_softmax_cross_entropy(y, logits) + 5e-3 * tf.add_n([tf.nn.l2_loss(w) for w in kernels])
    opt = tf.train.MomentumOptimizer(0.1, 0.9)
    train = (dist.DistributedOptimizer(opt, bucket_bytes=(432, 16, 4096)) if wrap else opt).minimize(loss)
    step = optimize(tf.get_default_graph(), [train], [x, y])
    kinds[wrap] = collections.Counter(op.type for op in step.graph.get_operations())
    rng = np.random.default_rng(0)
    with tf.Session(device=sys.argv[1]) as sess:
        sess.run(tf.global_variables_initializer())
        for _ in range(6):
            sess.run(train, {x: rng.standard_normal((4, 8, 8, 3)).astype(np.float32), y: rng.integers(0, 4, 4)})
        weights[wrap] = sess.run(tf.trainable_variables())
print(json.dumps({"added": sorted((kinds[True] - kinds[False]).elements()),
                  "gone": sorted((kinds[False] - kinds[True]).elements()),
                  "equal": all(np.array_equal(a, b) for a, b in zip(weights[False], weights[True]))}))
"""


@pytest.mark.parametrize("device,runahead", [("cpu", "0"), ("opencl", "0"), ("opencl", "1")])
def test_buckets_add_only_their_all_reduces_to_the_step_and_keep_its_weights_bit_for_bit(device, runahead):
    run = subprocess.run([sys.executable, "-c", BUCKETED, device, runahead],
                         env=dict(ENV, TFPLUS_ALLREDUCE_ALONE="1"), capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.splitlines()[-1])
    assert got == {"added": ["MpiAllreduceStart"] * 3 + ["MpiAllreduceWait"] * 3, "gone": [], "equal": True}


# A shared-memory split that gives each rank a group of its own (as if MPI saw each rank on a host of its own):
# the ranks, on one host by name, still get local ranks 0 and 1 (one GPU each), and rank 0 warns.
SPLIT_ALONE = """
import warnings, tfplus.distributed as dist
dist._split_shared = lambda MPI: MPI.COMM_WORLD.Split(MPI.COMM_WORLD.Get_rank())
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    dist.init()
print(f"rank {dist.rank()} local {dist.local_rank()} of {dist.local_size()} warned {len(seen)}")
"""


def test_local_ranks_follow_the_host_names_when_the_shared_memory_split_disagrees():
    run = _mpiexec("-c", SPLIT_ALONE, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "rank 0 local 0 of 2 warned 1" in run.stdout and "rank 1 local 1 of 2 warned 0" in run.stdout, run.stdout


@pytest.mark.parametrize("launcher_size", ["PMI_SIZE", "OMPI_COMM_WORLD_SIZE"])
def test_a_process_its_launcher_started_as_one_of_two_that_mpi_runs_alone_is_refused(tmp_path, launcher_size):
    # What a launcher of another MPI than the one mpi4py loaded leaves: its size in the environment, a world of 1.
    # Each such process would train the whole run as rank 0 into the same folder.
    env = {**ENV, launcher_size: "2"}
    run = subprocess.run([sys.executable, "-m", "tfplus", "train", "--synthetic", "--model", "lenet", "--steps", "2",
                          "--no-eval", "--distributed", "--checkpoint-dir", str(tmp_path / "ckpt")], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("tfplus train: error: --distributed:") and f"({launcher_size}=2)" in last, run.stderr
    assert "MPI4PY_LIBMPI" in last and not (tmp_path / "ckpt").exists()
