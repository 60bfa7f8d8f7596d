"""tfplus.distributed's Horovod-shaped API on gloo (torchrun): the collectives between steps and in a step, the
broadcast of the variables, and two PoCL opencl ranks at half the batch training as one process at the whole batch."""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="the gloo extra is not installed: pip install -e '.[gloo]'")

from ranks import torchrun  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "mpi_train.py"
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), TFPLUS_NUM_THREADS="1",
           TFPLUS_WORKERS="1", OMP_NUM_THREADS="1")

# Rank r holds r + 1 rows of r; one line a rank, with what every collective gave it.
API = """
import numpy as np, tfplus as tf, tfplus.distributed as dist
dist.init()
r = dist.rank()
v = tf.Variable(np.full((2, 3), r, np.float32))
s = tf.Variable(10 * r, dtype=tf.int64)
rows = tf.constant(np.full((r + 1, 2), r, np.float64))
total, mean = dist.allreduce(tf.constant([1.0, 2.0 * r]), op=dist.Sum), dist.allreduce(tf.constant([2.0 * r]))
later = dist.max_over_ranks_later(7 if r == 1 else 3)
dist.barrier()
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    dist.broadcast_global_variables(1, sess)
    got = sess.run([v, s, dist.allgather(rows), total, mean, dist.broadcast(tf.constant([5.0 + r]), 0)])
print(f"rank {r} of {dist.size()} {dist.backend()} local {dist.local_rank()} of {dist.local_size()}: "
      f"v {got[0].ravel().tolist()} s {got[1]} gather {got[2][:, 0].tolist()} sum {got[3].tolist()} "
      f"mean {got[4].tolist()} bcast {got[5].tolist()} max {later()} {dist.max_over_ranks(r)} "
      f"cross {dist.cross_rank()} of {dist.cross_size()} homogeneous {dist.is_homogeneous()} "
      f"mpi {dist.mpi_enabled()} {dist.mpi_threads_supported()} gloo {dist.gloo_enabled()}", flush=True)
"""


def test_the_collectives_and_the_broadcast_give_every_rank_the_same_values():
    run = torchrun([sys.executable, "-c", API], env=ENV)
    assert run.returncode == 0, run.stderr
    for r in (0, 1):
        line = (f"rank {r} of 2 gloo local {r} of 2: v {[1.0] * 6} s 10 gather [0.0, 1.0, 1.0] sum [2.0, 2.0] "
                "mean [1.0] bcast [5.0] max 7 1 cross 0 of 1 homogeneous True mpi False False gloo True")
        assert line in run.stdout, run.stdout


def _weights(path):
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


def test_two_opencl_gloo_ranks_at_half_the_batch_train_as_one_process(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    args = ["6", "16", "opencl"]  # 6 steps: the planned step replays from the fourth
    subprocess.run([sys.executable, SCRIPT, one, *args, "single"], env=ENV, check=True, timeout=120)
    run = torchrun([sys.executable, SCRIPT, two, *args, "distributed"], env=dict(ENV, TFPLUS_ALLREDUCE_BUCKET="64",
                                                                                 TFPLUS_ALLREDUCE_TRACE="1"))
    assert run.returncode == 0, run.stderr
    # each rank's report: its buckets went through gloo (no MPI shared memory), two buckets a step
    assert len(re.findall(r"rank \d: buckets summed by gloo's all-reduce", run.stderr)) == 2, run.stderr
    assert run.stderr.count("tfplus all-reduce bucket ") == 4, run.stderr
    want, got0, got1 = _weights(one / "rank0.npz"), _weights(two / "rank0.npz"), _weights(two / "rank1.npz")
    assert int(got0["global_step"]) == 6
    for name in want:
        np.testing.assert_allclose(got0[name], want[name], rtol=0, atol=1e-5, err_msg=name)
        np.testing.assert_array_equal(got1[name], got0[name], err_msg=name)


# Rank 0 runs a step more than rank 1, which finishes: rank 0's all-reduce fails at once, saying why, not at a timeout.
EXTRA = """
import numpy as np, tfplus as tf, tfplus.distributed as dist
dist.init()
x = dist.allreduce(tf.constant(np.ones(3, np.float32)))
with tf.Session() as sess:
    for _ in range(3 if dist.rank() == 0 else 2):
        sess.run(x)
"""


def test_a_rank_left_waiting_by_a_finished_one_fails_naming_the_cause():
    run = torchrun([sys.executable, "-c", EXTRA], env=dict(ENV, TFPLUS_ALLREDUCE_TIMEOUT="60"))
    assert run.returncode != 0
    assert "RuntimeError: rank 0: gloo's all-reduce failed: another rank died, was stopped, finished its steps, or " \
        "did not join within 60 s (TFPLUS_ALLREDUCE_TIMEOUT)" in run.stderr, run.stderr
    # gloo's own word (closed or reset, as rank 1's exit goes): rank 1 is gone, not late
    assert re.search(r"Connection (closed|reset) by peer", run.stderr), run.stderr
