"""tfplus.distributed with an embedding under `mpiexec -n 2`: DistributedOptimizer gathers the ranks' rows of the
IndexedSlices gradient (Horovod's default, sparse_as_dense=False), so two ranks looking up half the ids each train
to the weights of one process looking up all of them."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mpi4py", reason="the mpi extra is not installed: pip install -e '.[mpi]'")

MPIEXEC = Path(sys.executable).parent / "mpiexec"  # the mpich wheel installs it beside the interpreter
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), TFPLUS_NUM_THREADS="1",
           TFPLUS_WORKERS="1")

# argv: output folder, "single" or "distributed". Each process writes its weights to rank<r>.npz.
SCRIPT = """
import os, sys, numpy as np, tfplus as tf, tfplus.distributed as dist
distributed = sys.argv[2] == "distributed"
if distributed:
    dist.init()
rank, size = (dist.rank(), dist.size()) if distributed else (0, 1)
ids_all = np.array([0, 3, 3, 5, 1, 1, 1, 3], np.int32)  # the ranks' halves share row 3 and repeat rows
emb = tf.Variable(np.arange(18.0).reshape(6, 3) / 10, name="emb")
w = tf.Variable(np.full((3, 2), 1 / 3), name="w")
ids = tf.placeholder(tf.int32, [None])
loss = tf.reduce_mean(tf.square(tf.tanh(tf.matmul(tf.nn.embedding_lookup(emb, ids), w)) - 0.5))
opt = tf.train.GradientDescentOptimizer(0.5)
if distributed:
    opt = dist.DistributedOptimizer(opt)
step = opt.minimize(loss)
half = len(ids_all) // size
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    for _ in range(3):
        sess.run(step, {ids: ids_all[rank * half:(rank + 1) * half]})
    np.savez(os.path.join(sys.argv[1], f"rank{rank}.npz"), emb=sess.run(emb), w=sess.run(w))
"""


def test_two_ranks_with_an_embedding_train_as_one_process(tmp_path):
    if not MPIEXEC.exists():
        pytest.fail(f"{MPIEXEC} is missing: the mpich wheel (the mpi extra) brings it")
    script = tmp_path / "embedding.py"
    script.write_text(SCRIPT)
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    subprocess.run([sys.executable, str(script), str(one), "single"], env=ENV, check=True, timeout=120)
    run = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, str(script), str(two), "distributed"], env=ENV,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    with np.load(one / "rank0.npz") as want, np.load(two / "rank0.npz") as got0, np.load(two / "rank1.npz") as got1:
        for name in ("emb", "w"):
            np.testing.assert_allclose(got0[name], want[name], rtol=1e-12, err_msg=name)
            np.testing.assert_array_equal(got1[name], got0[name], err_msg=name)
        assert not np.array_equal(want["emb"][[0, 1, 3, 5]], np.arange(18.0).reshape(6, 3)[[0, 1, 3, 5]] / 10)
        np.testing.assert_array_equal(want["emb"][[2, 4]], np.arange(18.0).reshape(6, 3)[[2, 4]] / 10)
