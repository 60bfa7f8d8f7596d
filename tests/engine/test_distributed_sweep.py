"""Horovod-style TF1 scripts as their users bring them (tests/scripts/hvdsweep/, only the import changed), each run
under `mpiexec -n 2` on both devices (and -n 3, -n 1 where the rank count matters), checked against the same script
in one process at the global batch or against TensorFlow. One launch runs a group of scripts (_run.py); a script
that is to end the job gets a launch of its own."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mpi4py", reason="the mpi extra is not installed: pip install -e '.[mpi]'")

from ranks import MPIEXEC

SWEEP = Path(__file__).resolve().parents[1] / "scripts" / "hvdsweep"
# One thread and no forked workers per rank (the ranks share the CI's two cores); a collective that a rank never
# joins ends the job within a bound instead of the default 300 s.
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), TFPLUS_NUM_THREADS="1",
           TFPLUS_WORKERS="1", TFPLUS_ALLREDUCE_TIMEOUT="30")
# The scripts each job runs, and the variables' tolerance against one process (float32 sums in another order).
TRAINING = ["lr_scaled", "optimizers", "kwargs", "op_sum", "var_list_gate", "split_clip", "embeddings", "monitored",
            "estimator", "save_restore", "batch_norm", "mixed_dtypes", "tfdata_shard", "embeddings_budget"]
API = ["basics", "refusals", "metrics", "allgather", "broadcast_values", "late_variables"]
JOBS = {(2, "cpu"): TRAINING + API + ["half"],  # float16: OpenCL's kernels take none
        # what the device changes: the kernels around the collectives (a gather's rows, zeros of another dtype)
        (2, "opencl"): ["lr_scaled", "embeddings", "embeddings_budget", "batch_norm", "metrics", "allgather",
                        "broadcast_values"],
        (3, "cpu"): ["op_sum"] + API,  # 7 rows over 3; the collectives' rank arithmetic
        (1, "cpu"): API}  # a world of one: plain python, with the one-process references (the `one` fixture)
OPTIMIZERS = ["sgd", "momentum", "nesterov", "adam", "rmsprop", "rmsprop_centered", "adagrad", "adadelta", "ftrl"]
ATOL = 2e-5


def _launch(folder: Path, scripts: list, ranks: int = 0, device: str = "cpu") -> None:
    """Runs `scripts` in one process per rank (`ranks` 0: plain python, a world of one without mpiexec)."""
    run_py = [sys.executable, str(SWEEP / "_run.py"), device, str(folder), *(str(SWEEP / f"{s}.py") for s in scripts)]
    cmd = [str(MPIEXEC), "-n", str(ranks), *run_py] if ranks else run_py
    run = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
    (folder / "launch.log").write_text(f"exit status {run.returncode}\n{run.stdout[-3000:]}{run.stderr[-3000:]}")


@pytest.fixture(scope="module")
def one(tmp_path_factory) -> Path:
    """Every script in one process without mpiexec (a world of one): the training ones' whole global batch on the
    one rank."""
    folder = tmp_path_factory.mktemp("one")
    _launch(folder, TRAINING + ["half"] + API)
    return folder


@pytest.fixture(scope="module")
def jobs(tmp_path_factory, one):
    """The folder of a (ranks, device) job's launch, made the first time a test asks for it."""
    made: dict = {}

    def get(key) -> Path:
        if key[0] == 1:
            return one
        if key not in made:
            if not MPIEXEC.exists():
                pytest.fail(f"{MPIEXEC} is missing: the mpich wheel (the mpi extra) brings it")
            made[key] = tmp_path_factory.mktemp(f"n{key[0]}{key[1]}")
            _launch(made[key], JOBS[key], *key)
        return made[key]
    return get


def _load(path: Path) -> dict:
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


def _ranks(folder: Path, name: str, n: int) -> list[dict]:
    """Each rank's results; missing, the error of the script that ended the job (_run.py) or the launch's output."""
    errors = sorted(folder.glob("*.error"))
    log = errors[0] if errors else folder / "launch.log"
    assert all((folder / f"{name}-rank{r}.npz").exists() for r in range(n)), log.read_text()[-3000:]
    return [_load(folder / f"{name}-rank{r}.npz") for r in range(n)]


def _equal_everywhere(folder: Path, name: str, n: int) -> dict:
    """Rank 0's results, which every rank's equal bit for bit (the same update everywhere)."""
    got = _ranks(folder, name, n)
    for r in range(1, n):
        assert set(got[r]) == set(got[0])
        for k in got[0]:
            np.testing.assert_array_equal(got[r][k], got[0][k], err_msg=f"{name}: {k} on rank {r}")
    return got[0]


def _close(got: dict, want: dict, keys=None, atol=ATOL) -> None:
    for k in keys or want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=atol, err_msg=k)


def _cases() -> list:
    cases = []
    for key, scripts in JOBS.items():
        for s in scripts:
            names = [f"optimizers_{o}" for o in OPTIMIZERS] if s == "optimizers" else \
                [f"embeddings_{o}_{k}" for o in ("adam", "momentum", "adagrad") for k in ("sparse", "dense")] \
                if s == "embeddings" else [s]
            cases += [pytest.param(key, name, id=f"n{key[0]}-{key[1]}-{name}") for name in names]
    return cases


@pytest.mark.parametrize("key,name", _cases())
def test_a_script_under_mpiexec_computes_what_one_process_or_tensorflow_does(jobs, one, tf1, key, name):
    n, folder = key[0], jobs(key)
    CHECKS.get(name, _as_one_process)(folder, one, name, n, tf1)


def _as_one_process(folder, one, name, n, tf1, keys=None):
    got = _equal_everywhere(folder, name, n)
    want = _ranks(one, name, 1)[0]
    assert set(got) == set(want)
    _close(got, want, keys)
    return got, want


def _basics(folder, one, name, n, tf1):
    got = _ranks(folder, name, n)
    assert [int(g["rank"]) for g in got] == list(range(n))
    for r, g in enumerate(got):
        assert (g["size"], g["local_size"], g["local_rank"], g["cross_size"], g["cross_rank"]) == (n, n, r, 1, 0)
        assert g["initialized"] and g["mpi_built"] and g["homogeneous"] and not g["nccl_built"]


def _refusals(folder, one, name, n, tf1):
    for g in _ranks(folder, name, n):
        assert "op=Adasum" in str(g["adasum"]) and "Average" in str(g["adasum"])
        assert "allreduce op=Adasum" in str(g["adasum_allreduce"])
        assert "compression='fp16'" in str(g["fp16"]) and "Compression.none" in str(g["fp16"])
        assert "backward_passes_per_step=4" in str(g["passes"]) and "memory_budget" in str(g["passes"])
        assert "join() on rank" in str(g["join"]) and "same number of steps" in str(g["join"])


def _metrics(folder, one, name, n, tf1):
    got = _ranks(folder, name, n)
    for g in got:
        # each step's averaged loss: the mean of the ranks' own losses of that step
        np.testing.assert_allclose(g["losses"][:, 0], np.mean([h["losses"][:, 1] for h in got], 0), rtol=1e-6)
        np.testing.assert_allclose(g["avg_accuracy"], np.mean([h["accuracy"] for h in got]), rtol=1e-6)
        assert g["total_correct"] == sum(int(h["correct"]) for h in got) and str(g["total_correct_dtype"]) == "int32"
        np.testing.assert_array_equal(g["const_sum"], [n, 2 * n])


def _allgather(folder, one, name, n, tf1):
    rows = [2 * r + 1 if r != 1 else 0 for r in range(n)]
    want_preds = np.concatenate([np.full((k, 2, 3), r, np.float32) + np.arange(k)[:, None, None]
                                 for r, k in enumerate(rows)])
    want_labels = np.concatenate([np.arange(k) + 10 * r for r, k in enumerate(rows)])
    want_halves = np.concatenate([np.arange(k) / 3.0 + r for r, k in enumerate(rows)])
    for g in _ranks(folder, name, n):
        np.testing.assert_array_equal(g["preds"], want_preds)
        np.testing.assert_array_equal(g["labels"], want_labels)
        np.testing.assert_array_equal(g["flags"], np.concatenate([np.arange(k) % 2 == 0 for k in rows]))
        np.testing.assert_array_equal(g["halves"], want_halves)
        assert list(g["dtypes"]) == ["float32", "int64", "bool", "float64"]


def _broadcast_values(folder, one, name, n, tf1):
    for r, g in enumerate(_ranks(folder, name, n)):
        np.testing.assert_array_equal(g["order"], np.random.RandomState(0).permutation(6))
        assert g["seed"] == 1000 + n - 1 and g["scale"] == 2.5 and str(g["scale_dtype"]) == "float16"
        np.testing.assert_array_equal(g["a"], np.full((2, 2), n - 1.0))
        np.testing.assert_array_equal(g["c"], np.full(3, float(r)))  # not in broadcast_variables' list


def _late_variables(folder, one, name, n, tf1):
    for r, g in enumerate(_ranks(folder, name, n)):
        np.testing.assert_array_equal(g["after_first"], [[0, 0], [r, r]])  # as Horovod's: only what existed
        np.testing.assert_array_equal(g["after_second"], [[0, 0], [0, 0]])


def _lr_scaled(folder, one, name, n, tf1):
    got = _equal_everywhere(folder, name, n)
    assert got["step"] == 3
    w, b = _tf_softmax_sgd(tf1, got["w0"], got["X"], got["Y"], 0.05 * n, 4 * n, 3)
    _close(got, {"w": w, "b": b})


def _tf_softmax_sgd(tf1, w0, X, Y, lr, batch, steps):
    with tf1.Graph().as_default():
        x, y = tf1.placeholder(tf1.float32, [None, 5]), tf1.placeholder(tf1.int64, [None])
        w, b = tf1.Variable(w0), tf1.Variable(np.zeros(3, np.float32))
        loss = tf1.losses.sparse_softmax_cross_entropy(y, tf1.matmul(x, w) + b)
        train = tf1.train.GradientDescentOptimizer(lr).minimize(loss)
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            for i in range(steps):
                sess.run(train, {x: X[i * batch:(i + 1) * batch], y: Y[i * batch:(i + 1) * batch]})
            return sess.run([w, b])


def _embeddings(folder, one, name, n, tf1):
    """Horovod gathers a sparse gradient's rows (sparse_as_dense=False): the optimizer's sparse update of the rows
    some rank looked up, as TensorFlow's in one process; sparse_as_dense=True: its dense update."""
    got, _ = _as_one_process(folder, one, name, n, tf1)
    _, optimizer, kind = name.split("_")
    rng = np.random.RandomState(7)  # embeddings.py's data
    ids, y = rng.randint(0, 20, (4 * 8, 3)), rng.randint(0, 2, 4 * 8)
    make = {"adam": lambda: tf1.train.AdamOptimizer(0.1), "momentum": lambda: tf1.train.MomentumOptimizer(0.1, 0.9),
            "adagrad": lambda: tf1.train.AdagradOptimizer(0.3)}[optimizer]
    with tf1.Graph().as_default():
        ids_t, y_t = tf1.placeholder(tf1.int32, [None, 3]), tf1.placeholder(tf1.int32, [None])
        table, out = tf1.Variable(got["table0"]), tf1.Variable(got["out0"])
        pooled = tf1.reduce_mean(tf1.nn.embedding_lookup(table, ids_t), axis=1)
        opt = make()
        grads = opt.compute_gradients(tf1.losses.sparse_softmax_cross_entropy(y_t, tf1.matmul(pooled, out)))
        if kind == "dense":
            grads = [(tf1.convert_to_tensor(g), v) for g, v in grads]
        train = opt.apply_gradients(grads)
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            for i in range(4):
                sess.run(train, {ids_t: ids[i * 8:(i + 1) * 8], y_t: y[i * 8:(i + 1) * 8]})
            want = dict(zip(["table", "out"], sess.run([table, out])))
    _close(got, want)


def _monitored(folder, one, name, n, tf1):
    got, _ = _as_one_process(folder, one, name, n, tf1)
    np.testing.assert_array_equal(got["seen"], [1, 2, 3, 4, 5])  # the second session went on from rank 0's step 3
    assert (folder / "monitored_ckpt" / "model.ckpt-5.index").exists()


def _save_restore(folder, one, name, n, tf1):
    got, _ = _as_one_process(folder, one, name, n, tf1)
    np.testing.assert_array_equal(got["restored"], got["at_save"])
    assert got["restored_step"] == 3 and got["step"] == 6


def _batch_norm(folder, one, name, n, tf1):
    """Each rank normalizes by its own shard's statistics, and the gradients are averaged: TensorFlow's step on the
    mean of the shards' losses, each shard normalized apart. The moving statistics are each rank's own shards'
    (Horovod's)."""
    got = _ranks(folder, name, n)
    start = {k[len("start."):]: v for k, v in got[0].items() if k.startswith("start.")}
    rng = np.random.RandomState(13)  # batch_norm.py's data
    X = (rng.randn(3 * 8, 4) + np.arange(3 * 8)[:, None] * 0.3).astype(np.float32)
    Y = rng.randint(0, 2, len(X))
    per = 8 // n
    with tf1.Graph().as_default():
        x, y = tf1.placeholder(tf1.float32, [8, 4]), tf1.placeholder(tf1.int32, [8])
        var = {k: tf1.Variable(v) for k, v in start.items()}
        losses, moments = [], []
        for r in range(n):
            h = tf1.matmul(x[r * per:(r + 1) * per], var["dense.kernel"])
            mean, variance = tf1.nn.moments(h, [0])
            moments.append((mean, variance))
            h = tf1.nn.relu(tf1.nn.batch_normalization(h, mean, variance, var["batch_normalization.beta"],
                                                       var["batch_normalization.gamma"], 1e-3))
            logits = tf1.matmul(h, var["dense_1.kernel"]) + var["dense_1.bias"]
            losses.append(tf1.losses.sparse_softmax_cross_entropy(y[r * per:(r + 1) * per], logits))
        train = tf1.train.MomentumOptimizer(0.1, 0.9).minimize(tf1.add_n(losses) / n)
        moving = [[np.zeros(5, np.float32), np.ones(5, np.float32)] for _ in range(n)]
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            for i in range(3):
                stats = sess.run([train, moments], {x: X[i * 8:(i + 1) * 8], y: Y[i * 8:(i + 1) * 8]})[1]
                moving = [[0.9 * m + 0.1 * s for m, s in zip(mv, st)] for mv, st in zip(moving, stats)]
            want = {k: sess.run(v) for k, v in var.items()}
    for r, g in enumerate(got):
        _close(g, want)
        _close(g, {"batch_normalization.moving_mean": moving[r][0], "batch_normalization.moving_variance":
                   moving[r][1]})


def _half(folder, one, name, n, tf1):
    got, want = _equal_everywhere(folder, name, n), _load(one / f"{name}-rank0.npz")
    assert got["w16"].dtype == np.float16
    _close(got, want, ["w32"], atol=2e-3)  # its gradient went through the float16 layer
    np.testing.assert_allclose(got["w16"].astype(np.float32), want["w16"].astype(np.float32), atol=2e-3)


CHECKS = {"basics": _basics, "refusals": _refusals, "metrics": _metrics, "allgather": _allgather,
          "broadcast_values": _broadcast_values, "late_variables": _late_variables, "lr_scaled": _lr_scaled,
          "monitored": _monitored, "save_restore": _save_restore, "batch_norm": _batch_norm,
          "half": _half,
          **{f"embeddings_{o}_{k}": _embeddings for o in ("adam", "momentum", "adagrad") for k in ("sparse", "dense")}}


@pytest.mark.parametrize("script,says", [
    ("uneven_shards", "rank 0 started collective 5, but rank 1 finished after 4: every rank must run the same steps"),
    ("uneven_then_eval", "rank 0: the all-reduce of gradient bucket 1 did not finish within 5 s")])
def test_a_rank_with_fewer_batches_ends_the_job_with_an_error_not_a_hang(tmp_path, script, says):
    """A dataset sharded over the ranks gives one rank a batch more: Horovod's ranks wait for ever (unless the
    script calls join); here the job ends with an error: at once where the shorter rank finishes, after
    TFPLUS_ALLREDUCE_TIMEOUT where it goes on to another collective (an evaluation's allreduce)."""
    run = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, str(SWEEP / f"{script}.py"), str(tmp_path)],
                         env=dict(ENV, TFPLUS_ALLREDUCE_TIMEOUT="5"), capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert says in run.stderr, run.stderr[-3000:]


STALLED = """
import time, tfplus as tf, tfplus.distributed as hvd
hvd.init()
average = hvd.allreduce(tf.constant([1.0, 2.0]), name="metric")
with tf.Session() as sess:
    if hvd.rank() == 1:
        time.sleep(40)  # stuck reading its data
    sess.run(average)
"""


def test_a_rank_that_stalls_ends_the_others_wait_in_an_allreduce_of_the_script_within_the_timeout():
    """hvd.allreduce, allgather and broadcast waited in a blocking MPI_Allreduce, for ever where another rank
    stalls (the step's gradient buckets gave up after TFPLUS_ALLREDUCE_TIMEOUT, these did not)."""
    run = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, "-c", STALLED],
                         env=dict(ENV, TFPLUS_ALLREDUCE_TIMEOUT="3"), capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert "rank 0: the all-reduce of MpiAllreduce 'metric/MpiAllreduce' did not finish within 3 s" in run.stderr, \
        run.stderr[-3000:]
