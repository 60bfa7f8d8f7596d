"""tfplus.distributed as Horovod's users write it, round 2 (issue 36): three ranks (a global batch that does not divide
by them), Horovod's tensor collectives inside the graph (allgather with a different row count on each rank,
broadcast, integer allreduce), DistributedOptimizer(op=Sum) for unequal per-rank batches, a Saver written by rank 0
and restored on every rank, and Horovod's arguments tfplus does not do, refused by name. One `mpiexec -n 3` launch
serves every case."""
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
# Rank r's rows of each global batch of ROWS = 5 + 5 + 4 (uneven, as 128 over 3 ranks is 43 + 43 + 42).
ROWS, SPLIT, STEPS = 14, (0, 5, 10, 14), 3
DATA = np.random.RandomState(7).randn(STEPS * ROWS, 6).astype(np.float32)

SCRIPT = """
import os, sys, numpy as np, tfplus as tf, tfplus.distributed as hvd
out = sys.argv[1]
hvd.init()
r, n = hvd.rank(), hvd.size()
ROWS, SPLIT, STEPS = 14, (0, 5, 10, 14), 3
DATA = np.random.RandomState(7).randn(STEPS * ROWS, 6).astype(np.float32)
got = {}
with tf.Graph().as_default():
    # allgather: rank r gives r + 1 rows of (r, row) pairs; int64 labels too
    mine = tf.placeholder(tf.float32, [None, 2])
    ids = tf.placeholder(tf.int64, [None])
    gathered, gathered_ids = hvd.allgather(mine), hvd.allgather(ids)
    value = tf.constant([10.0 * r, 1.0])
    count = tf.constant([r + 1], tf.int32)
    ops = {"gathered": gathered, "gathered_ids": gathered_ids, "from1": hvd.broadcast(value, 1),
           "int_from2": hvd.broadcast(count, 2), "int_sum": hvd.allreduce(count, op=hvd.Sum),
           "int_mean": hvd.allreduce(count)}
    rows = np.stack([np.full(r + 1, r), np.arange(r + 1)], 1).astype(np.float32)
    with tf.Session() as sess:
        got.update(sess.run(ops, {mine: rows, ids: np.arange(r + 1) + 100 * r}))
for i, name in enumerate(["backward_passes_per_step", "compression"]):
    with tf.Graph().as_default():
        try:
            kwargs = {name: 2} if i == 0 else {name: hvd.Compression.fp16}
            hvd.DistributedOptimizer(tf.train.GradientDescentOptimizer(0.1), **kwargs)
        except NotImplementedError as e:
            got[f"refused_{name}"] = str(e)
with tf.Graph().as_default():
    # Each rank's summed loss over the global batch's row count, summed over the ranks: one process's mean loss
    tf.set_random_seed(r)
    x = tf.placeholder(tf.float32, [None, 6])
    w = tf.Variable(tf.random_normal([6, 3]), name="w")
    b = tf.Variable(tf.zeros([3]), name="b")
    loss = tf.reduce_sum(tf.square(tf.nn.tanh(tf.matmul(x, w) + b) - 0.5)) / ROWS
    step = tf.train.get_or_create_global_step()
    train = hvd.DistributedOptimizer(tf.train.MomentumOptimizer(0.1, 0.9), op=hvd.Sum).minimize(loss, step)
    bcast = hvd.broadcast_variables([w, b], 0)
    saver = tf.train.Saver([w, b, step])
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(bcast)
        got["w0"] = sess.run(w)
        for i in range(STEPS):
            sess.run(train, {x: DATA[i * ROWS + SPLIT[r]:i * ROWS + SPLIT[r + 1]]})
        got["w"], got["b"] = sess.run([w, b])
        if r == 0:
            saver.save(sess, os.path.join(out, "ckpt", "model"), global_step=step)
    hvd.barrier()  # the others restore once rank 0 has written it
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        saver.restore(sess, tf.train.latest_checkpoint(os.path.join(out, "ckpt")))
        got["restored_w"], got["restored_step"] = sess.run([w, step])
np.savez(os.path.join(out, f"rank{r}.npz"), **got)
"""


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """Each of the three ranks' results."""
    out = tmp_path_factory.mktemp("three")
    if not MPIEXEC.exists():
        pytest.fail(f"{MPIEXEC} is missing: the mpich wheel (the mpi extra) brings it")
    run = subprocess.run([str(MPIEXEC), "-n", "3", sys.executable, "-c", SCRIPT, str(out)], env=ENV,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    results = []
    for r in range(3):
        with np.load(out / f"rank{r}.npz") as f:
            results.append({k: f[k] for k in f.files})
    return results


def test_allgather_concatenates_a_different_row_count_from_each_rank_in_rank_order(ranks):
    want = np.array([[0, 0], [1, 0], [1, 1], [2, 0], [2, 1], [2, 2]], np.float32)
    for got in ranks:
        np.testing.assert_array_equal(got["gathered"], want)
        assert got["gathered_ids"].dtype == np.int64
        assert got["gathered_ids"].tolist() == [100 * 0, 100, 101, 200, 201, 202]


def test_broadcast_and_integer_allreduce_of_tensors(ranks):
    for got in ranks:
        assert got["from1"].tolist() == [10.0, 1.0]
        assert got["int_from2"].dtype == np.int32 and got["int_from2"].tolist() == [3]
        assert got["int_sum"].dtype == np.int32 and got["int_sum"].tolist() == [6]
        assert got["int_mean"].dtype == np.float64 and got["int_mean"].tolist() == [2.0]  # TF's int / int


def test_op_sum_over_unequal_per_rank_batches_trains_as_one_process_at_the_global_batch(ranks):
    """5 + 5 + 4 rows: each rank's loss sums its rows over the global batch's 14, DistributedOptimizer(op=Sum) adds
    the ranks' gradients: one process's step on the mean loss of all 14 rows (README: "The global batch")."""
    import tfplus as tf
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [None, 6])
        w = tf.Variable(ranks[0]["w0"])
        b = tf.Variable(tf.zeros([3]))
        loss = tf.reduce_mean(tf.reduce_sum(tf.square(tf.nn.tanh(tf.matmul(x, w) + b) - 0.5), 1))
        train = tf.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for i in range(STEPS):
                sess.run(train, {x: DATA[i * ROWS:(i + 1) * ROWS]})
            want_w, want_b = sess.run([w, b])
    assert not np.allclose(want_w, ranks[0]["w0"])  # it trained
    for got in ranks:
        np.testing.assert_allclose(got["w"], want_w, rtol=0, atol=1e-6)
        np.testing.assert_allclose(got["b"], want_b, rtol=0, atol=1e-6)
        np.testing.assert_array_equal(got["w"], ranks[0]["w"])  # the same update on every rank


def test_a_checkpoint_rank_0_wrote_restores_on_every_rank(ranks):
    for got in ranks:
        np.testing.assert_array_equal(got["restored_w"], ranks[0]["w"])
        assert int(got["restored_step"]) == STEPS


def test_horovod_arguments_tfplus_does_not_do_are_refused_naming_the_way_instead(ranks):
    got = ranks[0]
    assert "backward_passes_per_step=2" in str(got["refused_backward_passes_per_step"])
    assert "memory_budget" in str(got["refused_backward_passes_per_step"])
    assert "Compression.none" in str(got["refused_compression"])


def test_mpi4py_without_an_mpi_library_names_the_extra(monkeypatch):
    """pip install mpi4py alone: mpi4py finds no libmpi and raises RuntimeError as MPI is imported."""
    from tfplus import distributed

    class NoLibrary:
        def find_spec(self, name, path=None, target=None):
            if name == "mpi4py.MPI":
                raise RuntimeError("cannot load MPI library")

    monkeypatch.delitem(sys.modules, "mpi4py.MPI", raising=False)
    monkeypatch.setattr(sys, "meta_path", [NoLibrary(), *sys.meta_path])
    assert not distributed.is_initialized()
    with pytest.raises(ImportError, match=r"found no MPI library.*pip install 'tfplus\[mpi\]'"):
        distributed.init()


def test_each_rank_takes_a_gpu_by_local_rank_and_ranks_share_too_few_devices(monkeypatch):
    """--device opencl under mpiexec: local rank K takes the host's K-th GPU, not entry K of a list that may start
    with PoCL's CPU device; with one device (PoCL on a CPU box) every rank shares it, warned, instead of rank 1
    failing on opencl:1."""
    from types import SimpleNamespace

    from tfplus import distributed
    from tfplus.runtime.opencl import discovery
    if discovery.cl is None:
        pytest.skip("pyopencl is not installed")
    cpu, gpu = (SimpleNamespace(type=discovery.cl.device_type.CPU), SimpleNamespace(type=discovery.cl.device_type.GPU))
    monkeypatch.setattr(discovery, "cl_devices", lambda: [cpu, gpu, gpu])
    monkeypatch.setattr(discovery, "build_error", lambda d: None)
    monkeypatch.setattr(distributed, "local_size", lambda: 2)
    for k, want in ((0, "opencl:1"), (1, "opencl:2")):
        monkeypatch.setattr(distributed, "local_rank", lambda k=k: k)
        assert distributed.local_device() == want
    monkeypatch.setattr(discovery, "cl_devices", lambda: [cpu])
    with pytest.warns(RuntimeWarning, match="2 ranks on this host share its 1 OpenCL device"):
        assert distributed.local_device() == "opencl:0"
