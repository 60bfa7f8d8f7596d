"""tfplus.distributed on torch.distributed's gloo (torchrun, beside this Python): two ranks at half the batch train to
one process's weights at the whole batch and to an MPI job's, the same on both ranks; the launcher or
TFPLUS_DISTRIBUTED_BACKEND picks the backend, and a bad choice is a one-line error naming the variable and the fix."""
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="the gloo extra is not installed: pip install -e '.[gloo]'")
pytest.importorskip("mpi4py", reason="the mpi extra is not installed: pip install -e '.[mpi]'")

from ranks import MPIEXEC, torchrun  # noqa: E402

from tfplus import distributed  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "mpi_train.py"
# One thread and no forked workers per process: two ranks share the CI's two cores.
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), TFPLUS_NUM_THREADS="1",
           TFPLUS_WORKERS="1", OMP_NUM_THREADS="1")


def _weights(path):
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


def test_two_gloo_ranks_at_half_the_batch_train_as_one_process_and_as_mpi(tmp_path):
    one, gloo, mpi = tmp_path / "one", tmp_path / "gloo", tmp_path / "mpi"
    args = ["4", "16", "cpu"]
    env = dict(ENV, TFPLUS_ALLREDUCE_BUCKET="64")  # two buckets: the dense layer's all-reduce overlaps conv's grads
    subprocess.run([sys.executable, SCRIPT, one, *args, "single"], env=ENV, check=True, timeout=120)
    run = torchrun([sys.executable, SCRIPT, gloo, *args, "distributed"], env=env)
    assert run.returncode == 0, run.stderr
    run = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, SCRIPT, mpi, *args, "distributed"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    want, got0, got1, by_mpi = (_weights(p) for p in (one / "rank0.npz", gloo / "rank0.npz", gloo / "rank1.npz",
                                                      mpi / "rank0.npz"))
    assert set(got0) == set(want) and int(got0["global_step"]) == 4
    for name in want:
        np.testing.assert_allclose(got0[name], want[name], rtol=0, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(got0[name], by_mpi[name], rtol=0, atol=1e-6, err_msg=name)
        np.testing.assert_array_equal(got1[name], got0[name], err_msg=name)  # the same update on every rank
    # Rank 0 alone writes checkpoints (rank 1 was given no checkpoint_dir).
    assert (gloo / "ckpt" / "model.ckpt-4.index").exists() and not (gloo / "rank1").exists()


TORCHRUN_ENV = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


@pytest.mark.parametrize("given,launcher,want", [
    (None, TORCHRUN_ENV, "gloo"),                             # torchrun's variables
    (None, {**TORCHRUN_ENV, "PMI_SIZE": "2"}, "mpi"),         # mpiexec's too: MPI's launcher started it
    (None, {}, "mpi"),                                        # no launcher: MPI (a world of one)
    (None, {"WORLD_SIZE": "2"}, "gloo"),                      # part of torchrun's: gloo, which names the rest
    ("GLOO", {}, "gloo"),                                     # forced, in any case
    ("mpi", TORCHRUN_ENV, "mpi"),
])
def test_the_launcher_picks_the_backend_unless_one_is_forced(monkeypatch, given, launcher, want):
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE",
                "MV2_COMM_WORLD_SIZE", "TFPLUS_DISTRIBUTED_BACKEND"):
        monkeypatch.delenv(var, raising=False)
    for var, value in launcher.items():
        monkeypatch.setenv(var, value)
    if given is not None:
        monkeypatch.setenv("TFPLUS_DISTRIBUTED_BACKEND", given)
    assert distributed._backend(None) == want
    assert distributed._backend("gloo") == "gloo"  # init(backend=...) wins over the variable


def test_a_bad_backend_names_the_variable_and_the_choices(monkeypatch):
    monkeypatch.setenv("TFPLUS_DISTRIBUTED_BACKEND", "nccl")
    with pytest.raises(ValueError, match=r"^TFPLUS_DISTRIBUTED_BACKEND='nccl': give mpi .* or gloo "):
        distributed.init()
    with pytest.raises(ValueError, match=r"^init\(backend=...\)='ucc': give mpi"):
        distributed.init(backend="ucc")
    assert not distributed.is_initialized()


def test_gloo_with_part_of_torchruns_variables_says_how_to_launch(monkeypatch):
    for var in ("MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    for backend in ("gloo", None):  # forced, or picked by the variables set
        with pytest.raises(distributed.LaunchError, match=r"MASTER_ADDR, MASTER_PORT are unset: start the ranks "
                                                          r"with torchrun --nproc-per-node N"):
            distributed.init(backend=backend)
    assert not distributed.is_initialized()


def test_gloo_without_torch_says_what_to_install(tmp_path):
    code = "import sys; sys.modules['torch'] = None; from tfplus.cli import main; sys.exit(main(sys.argv[1:]))"
    run = subprocess.run([sys.executable, "-c", code, "train", "--synthetic", "--model", "lenet", "--steps", "2",
                          "--no-eval", "--distributed"], env=dict(ENV, TFPLUS_DISTRIBUTED_BACKEND="gloo"),
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("tfplus train: error: --distributed: TFPLUS_DISTRIBUTED_BACKEND=gloo: the gloo backend "
                           "needs torch") and 'pip install "tfplus[gloo]"' in last, run.stderr


# No launcher: a world of one, as MPI without mpiexec; with TFPLUS_ALLREDUCE_ALONE=1 its DistributedOptimizer builds
# the buckets' all-reduces anyway, which run through gloo (a group of one) and leave the gradients as they are.
ALONE = """
import numpy as np, tfplus as tf, tfplus.distributed as dist
dist.init()
x = tf.placeholder(tf.float32, [None, 4])
w = tf.Variable(np.ones((4, 2), np.float32))
loss = tf.reduce_mean(tf.square(tf.matmul(x, w)))
train = dist.DistributedOptimizer(tf.train.GradientDescentOptimizer(0.1), bucket_bytes=16).minimize(loss)
ops = sorted({op.type for op in tf.get_default_graph().get_operations() if op.type.startswith("Mpi")})
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    sess.run(train, {x: np.ones((2, 4), np.float32)})
    print(dist.backend(), dist.size(), dist.local_size(), dist.max_over_ranks(5), ops, sess.run(w)[0].tolist())
"""


def test_gloo_without_a_launcher_is_a_world_of_one():
    run = subprocess.run([sys.executable, "-c", ALONE], env=dict(ENV, TFPLUS_DISTRIBUTED_BACKEND="gloo",
                                                                 TFPLUS_ALLREDUCE_ALONE="1"),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    ops = "['MpiAllreduceStart', 'MpiAllreduceWait']"
    # x w is 4 in each of the 2 x 2 entries: d(mean((x w)^2))/dw = 2 / 4 * (2 rows * 4) = 4 for every weight
    w = float(np.float32(1) - np.float32(0.1) * np.float32(4))
    assert run.stdout.strip() == f"gloo 1 1 5 {ops} [{w}, {w}]", run.stdout


# Rank 1 stalls (a minute's sleep) before its second all-reduce: rank 0 gives up after TFPLUS_ALLREDUCE_TIMEOUT, and
# its failure ends the job (torchrun stops rank 1) long before the sleep ends.
STALL = """
import time, numpy as np, tfplus as tf, tfplus.distributed as dist
dist.init()
x = dist.allreduce(tf.constant(np.ones(3, np.float32)))
with tf.Session() as sess:
    sess.run(x)
    if dist.rank() == 1:
        time.sleep(60)
    sess.run(x)
"""


def test_a_stalled_rank_ends_the_job_after_the_timeout():
    started = time.monotonic()
    run = torchrun([sys.executable, "-c", STALL], env=dict(ENV, TFPLUS_ALLREDUCE_TIMEOUT="2"))
    assert run.returncode != 0 and time.monotonic() - started < 55, run.stderr
    assert "rank 0: gloo's all-reduce failed: another rank died, was stopped, finished its steps, or did not join " \
        "within 2 s (TFPLUS_ALLREDUCE_TIMEOUT)" in run.stderr and "Timed out waiting 2000ms" in run.stderr, run.stderr
