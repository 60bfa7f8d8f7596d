"""The cpu device's intra-op threads (tfplus.threads), tf.ConfigProto and the thread controls."""
from __future__ import annotations

import ast
import gc
import os
import platform
import subprocess
import sys
import threading
import time
import weakref

import numpy as np
import pytest

import tfplus as tf
from tfplus import threads
from tfplus.graphs import training_graph
from tfplus.graphs.lenet import lenet


def test_split_is_even_bounded_and_covers():
    with threads.using(3):
        assert threads.split(10) == [(0, 3), (3, 6), (6, 10)]
        assert threads.split(2) == [(0, 1), (1, 2)]
        assert threads.split(10, grain=4) == [(0, 5), (5, 10)]  # no shard under the grain
        assert threads.split(7, grain=4) == [(0, 7)]
        assert threads.split(0) == [(0, 0)]
    with threads.using(1):
        assert threads.split(100) == [(0, 100)]


def test_run_uses_the_pool_and_waits_for_every_shard_when_one_raises():
    names, done = [None] * 4, []

    def work(i):
        names[i] = threading.current_thread().name
        if i == 1:
            raise KeyError("shard 1")
        done.append(i)

    with threads.using(4):
        with pytest.raises(KeyError, match="shard 1"):
            threads.run(work, range(4))
        assert sorted(done) == [0, 2, 3]
        assert names[0] == threading.current_thread().name and all("intra-op" in n for n in names[1:])
        with pytest.raises(ValueError, match="5 shards for 4 threads"):
            threads.run(work, range(5))
        # Inside a shard, kernels run whole (no nested pools).
        assert threads.run(lambda _: threads.current(), range(2)) == [1, 1]
        assert threads.current() == 4


def test_a_worker_keeps_nothing_of_a_finished_job():
    """A job's closure holds its kernel's arrays (views of a memory plan's arena): a worker that kept it while it
    waits for the next would keep a grown arena's old memory alive (a session measured 2.1 MB over its plan)."""
    class Held:
        pass
    held = Held()
    ref = weakref.ref(held)
    with threads.using(2):
        assert threads.run(lambda item: type(item).__name__, [held, held]) == ["Held", "Held"]
    del held
    gc.collect()
    assert ref() is None


def test_tasks_are_a_few_per_thread_even_bounded_and_cover():
    with threads.using(3):
        assert threads.tasks(24) == [(4 * i, 4 * i + 4) for i in range(6)]  # OVERSPLIT (2) per thread
        assert threads.tasks(10, grain=4) == [(0, 5), (5, 10)]
        assert threads.tasks(7, grain=4) == [(0, 7)]
        assert threads.slots(12) == 3 and threads.slots(2) == 2
    with threads.using(1):
        assert threads.tasks(100) == [(0, 100)]  # one thread: one task, the whole work


def test_run_shared_gives_a_held_back_thread_fewer_tasks():
    """What one equal shard per thread cannot do: the thread held up by its first task (as another process on
    its core would) takes no more, the other takes the rest; results stay in item order."""
    ran, lock = [], threading.Lock()

    def work(slot, i):
        with lock:
            ran.append(slot)
            first = len(ran) == 1
        time.sleep(0.3 if first else 0.002)  # the first task taken holds its thread back
        return i * i

    with threads.using(2):
        assert threads.run_shared(work, range(8)) == [i * i for i in range(8)]
        assert len(ran) == 8 and ran.count(ran[0]) == 1 and set(ran) == {0, 1}  # the held-back thread: 1 task
        assert threads.run_shared(lambda slot, _: threads.current(), range(3)) == [1, 1, 1]  # no nested pools


def test_run_shared_finishes_every_task_when_one_raises():
    done = []

    def work(slot, i):
        if i == 2:
            raise KeyError("task 2")
        done.append(i)

    with threads.using(2):
        with pytest.raises(KeyError, match="task 2"):
            threads.run_shared(work, range(6))
    assert sorted(done) == [0, 1, 3, 4, 5]


def test_default_is_the_affinity_mask_then_the_environment(monkeypatch):
    monkeypatch.delenv(threads.ENV, raising=False)
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {0, 3, 5}, raising=False)
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 64)
    assert threads.default_threads() == 3 and threads.resolve(0) == 3 and threads.resolve(None) == 3
    monkeypatch.setenv(threads.ENV, "5")
    assert threads.default_threads() == 5 and threads.resolve(2) == 2
    for bad in ("0", "two", "1.5", "-1"):
        monkeypatch.setenv(threads.ENV, bad)
        with pytest.raises(ValueError, match="TFPLUS_NUM_THREADS"):
            threads.default_threads()


def test_blas_is_single_threaded_inside_a_step_and_restored_after():
    import threadpoolctl  # a dependency: tfplus.threads sets BLAS threads through it

    def blas_threads():
        return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]

    before = blas_threads()
    with threads.step(2):
        with threads.step(3):  # a nested run keeps the limit
            assert set(blas_threads()) <= {1}
        assert set(blas_threads()) <= {1} and threads.current() == 2
        # The limit is the process's, so the pool's workers see it too (pool x BLAS never oversubscribes).
        assert threads.run(lambda _: blas_threads(), range(2)) == [[1] * len(before)] * 2
    assert blas_threads() == before


def test_a_blas_loaded_after_the_first_step_is_single_threaded_inside_the_next():
    """scipy brings its own OpenBLAS (the planner's MILP imports it): a step after that import limits it too, not
    only the BLAS libraries the first step found. In a fresh process, where the import order is known."""
    code = """
import threadpoolctl
from tfplus import threads
def blas():
    return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
with threads.step(2):
    first = len(blas())
import scipy.optimize
with threads.step(2):
    print(first, len(blas()), set(blas()))
"""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="2")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=True)
    first, now, limits = out.stdout.split(maxsplit=2)
    assert int(now) > int(first) and limits.strip() == "{1}", out.stdout


def test_config_proto_accepts_tf1_fields_and_names_unknown_ones():
    config = tf.ConfigProto(intra_op_parallelism_threads=2, inter_op_parallelism_threads=4,
                            allow_soft_placement=True, log_device_placement=False, device_count={"GPU": 0},
                            gpu_options=tf.GPUOptions(allow_growth=True, per_process_gpu_memory_fraction=0.5),
                            graph_options=tf.GraphOptions(optimizer_options=tf.OptimizerOptions(
                                opt_level=tf.OptimizerOptions.L0, global_jit_level=tf.OptimizerOptions.OFF)))
    config.gpu_options.allow_growth = False
    assert config.intra_op_parallelism_threads == 2 and config.device_count == {"GPU": 0}
    assert tf.ConfigProto().gpu_options == tf.GPUOptions() and "allow_soft_placement=True" in repr(config)
    with pytest.raises(TypeError, match="no field 'intra_op_threads'.*intra_op_parallelism_threads"):
        tf.ConfigProto(intra_op_threads=2)
    with pytest.raises(ValueError, match="inter_op_parallelism_threads=-1"):
        tf.ConfigProto(inter_op_parallelism_threads=-1)


def test_session_config_sets_the_thread_count_its_kernels_split_for(monkeypatch):
    seen, sharded = [], threads.sharded
    monkeypatch.setattr(threads, "sharded", lambda *a: seen.append(threads.current()) or sharded(*a))
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None])
        y = x * 2.0
    with tf.Session(graph=g, config=tf.ConfigProto(intra_op_parallelism_threads=3)) as sess:
        sess.run(y, {x: [1.0]})
    assert seen and set(seen) == {3}
    assert tf.Session(graph=g, config={"intra_op_parallelism_threads": 2})._threads == 2


def _train(threads_n: int, graph_fn, steps=2, batch=5):
    """Losses and final variables after `steps` steps of a small training graph run on threads_n threads."""
    tg = graph_fn()
    rng = np.random.default_rng(1)
    images = rng.standard_normal((batch, *tg.images.shape.as_list()[1:])).astype(np.float32)
    labels = rng.integers(0, 10, batch).astype(np.int32)
    with tf.Session(graph=tg.graph, config=tf.ConfigProto(intra_op_parallelism_threads=threads_n)) as sess:
        sess.run(tg.init_op)
        losses = [sess.run([tg.train_op, tg.loss], {tg.images: images, tg.labels: labels})[1] for _ in range(steps)]
        variables = tg.graph.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES)
        return np.array(losses), sess.run(variables)


_GRAPHS = {
    # Widths that take all three conv paths (shift with 9 and 3 taps, Winograd from 64 channels), max-pools,
    # bias, ReLU, FC, cross-entropy, weight decay and Nesterov momentum.
    "mentee": lambda: training_graph(total_steps=10, seed=3, model_kwargs={"conv_widths": (8, 64, 64)}),
    "lenet": lambda: training_graph(lenet, total_steps=10, seed=3, optimizer="adam"),  # the im2col path
    # NHWC: the generic path's staging and BiasAddGrad's per-shard partial sums.
    "lenet_nhwc": lambda: training_graph(lenet, total_steps=10, seed=3, data_format="NHWC"),
}


@pytest.mark.parametrize("model", sorted(_GRAPHS))
def test_training_is_deterministic_per_thread_count_and_agrees_across_counts(model, monkeypatch):
    monkeypatch.setattr(threads, "GRAIN", 64)  # tiny tensors still split, so every kernel runs sharded
    ref_loss, ref_vars = _train(1, _GRAPHS[model])
    for n in (2, 3, 4):
        loss, variables = _train(n, _GRAPHS[model])
        again_loss, again_vars = _train(n, _GRAPHS[model])
        np.testing.assert_array_equal(loss, again_loss)
        for a, b in zip(variables, again_vars):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
        for a, b in zip(variables, ref_vars):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)  # Adam: step ~ lr


def test_cli_threads_flag_environment_and_devices(monkeypatch, capsys):
    from tfplus.cli import main
    monkeypatch.setenv(threads.ENV, "3")
    assert main(["devices"]) == 0
    assert "cpu        NumPy, 3 threads" in capsys.readouterr().out
    monkeypatch.setenv(threads.ENV, "many")
    assert main(["devices"]) == 2
    assert "TFPLUS_NUM_THREADS='many'" in capsys.readouterr().err
    monkeypatch.delenv(threads.ENV)
    seen, sharded = set(), threads.sharded
    monkeypatch.setattr(threads, "sharded", lambda *a: seen.add(threads.current()) or sharded(*a))
    assert main(["profile", "--threads", "2", "--steps", "4", "--batch-size", "2", "--widths", "4,4",
                 "--fc-widths", "8"]) == 0
    assert seen == {2}
    capsys.readouterr()
    assert main(["train", "--threads", "0", "--synthetic"]) == 2
    assert "--threads" in capsys.readouterr().err


def test_memory_plans_declare_every_shards_scratch(monkeypatch):
    """Under a memory budget every ctx.workspace call must match the kernels' declarations: with 3 threads,
    3 image shards' scratch and partial filter gradients, pooling slices per shard."""
    monkeypatch.setattr(threads, "GRAIN", 64)
    tg = _GRAPHS["mentee"]()
    rng = np.random.default_rng(2)
    feed = {tg.images: rng.standard_normal((6, 3, 32, 32)).astype(np.float32),
            tg.labels: rng.integers(0, 10, 6).astype(np.int32)}
    config = tf.ConfigProto(intra_op_parallelism_threads=3)
    losses = []
    for budget in (None, "24MB"):
        with tf.Session(graph=tg.graph, config=config, memory_budget=budget) as sess:
            sess.run(tg.init_op)
            losses.append([sess.run([tg.train_op, tg.loss], feed)[1] for _ in range(2)])
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)


def test_a_forked_child_starts_its_own_workers():
    import os
    import signal
    with threads.using(2):
        threads.run(lambda i: i, range(2))  # the parent's pool exists
        pid = os.fork()
        if pid == 0:  # the child: the parent's workers are not here; waiting on them, it dies by the alarm
            signal.alarm(20)
            os._exit(0 if threads.run(lambda i: i * 2, range(2)) == [0, 2] else 1)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="tunes glibc's malloc only")
def test_cpu_runtime_keeps_freed_memory_for_the_next_step():
    # A step frees its outputs and scratch and allocates them again the next step: after the first, none of
    # that may page-fault (fresh pages cost a fault and a zeroing each, and doubled a step at 16 shards).
    # A fresh process, so that the malloc state is this pattern's alone.
    code = """if True:
        import resource, numpy as np
        from tfplus.runtime.cpu import CPURuntime
        CPURuntime()
        faults = []
        for step in range(3):
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            bufs = [np.ones(mb << 20, np.uint8) for mb in (24, 8, 8, 8, 8, 8, 8)]
            del bufs
            faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        print(faults)
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    first, *later = ast.literal_eval(out)
    assert first > 1000 and max(later) < 50, (first, later)  # 72 MB: ~3000 faults with 2 MB pages, 18000 without
