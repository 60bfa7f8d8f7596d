"""The default worker count's rule (tfplus.engine.workers.Payoff): the workers take a training step only where the
time their split saves (the divisible work, priced by the planner's cost model) beats what the split costs (the
kernel calls every worker repeats, the rendezvous, the shared-memory copies), decided from the step's shapes before
it runs, never by timing it; a count given (Session(workers=N), $TFPLUS_WORKERS, --workers) is obeyed."""
from __future__ import annotations

import numpy as np
import pytest

import tfplus as tf
from tfplus.cli import main
from tfplus.engine import workers
from tfplus.graphs import training_graph


@pytest.fixture(autouse=True)
def _default_count(monkeypatch):
    monkeypatch.delenv(workers.ENV, raising=False)


def _graph():
    return training_graph(total_steps=10, seed=3, model_kwargs={"conv_widths": (8, 16), "fc_widths": (32,)})


def _feeds(tg, step: int, batch: int):
    rng = np.random.default_rng(step)
    return {tg.images: rng.standard_normal((batch, 3, 32, 32)).astype(np.float32),
            tg.labels: rng.integers(0, 10, batch).astype(np.int32)}


def _train(tg, batch: int, count=None, steps: int = 3):
    """Losses after `steps` steps on 2 threads (`count`: Session(workers=)), the live worker pids and the steps'
    records (a _Step, or why the parent runs it; not the initializer's) after the last step."""
    with tf.Session(graph=tg.graph, config=tf.ConfigProto(intra_op_parallelism_threads=2), workers=count) as sess:
        sess.run(tg.init_op)
        losses = [sess.run([tg.train_op, tg.loss], _feeds(tg, i, batch))[1] for i in range(steps)]
        w = sess.workers
        if w is None:  # (workers=1)
            return np.array(losses), [], [], ""
        return np.array(losses), w.pids(), [s for s in w.steps.values() if s != workers._NO_BATCH], w.summary()


def test_a_small_step_stays_in_the_parent_and_a_large_one_goes_to_the_workers():
    """One net at batch 16 (its per-call cost, paid again by the second worker, and the rendezvous outweigh half its
    arithmetic) and at batch 64 (four times the arithmetic, the same calls): the rule's inputs decide."""
    tg = _graph()
    _, pids, steps, summary = _train(tg, 16)
    assert pids == [] and len(steps) == 1 and steps[0].startswith("too small a step for the workers"), steps
    assert summary.startswith("training steps in this process: too small a step") and "rendezvous" in summary

    want, _, _, _ = _train(tg, 64, count=1)
    got, pids, (st,), summary = _train(tg, 64)
    assert len(pids) == 2, summary
    pay = st.payoff  # what decided: the divisible work grows with the batch, the repeated calls do not
    assert pay.saved > pay.cost and pay.n == 2 and pay.commands == 1, pay
    assert summary.startswith("training steps on 2 worker processes: 2 workers would save"), summary
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_the_rule_is_the_steps_shapes_and_a_given_count_is_obeyed():
    """The same step's Payoff from its shapes alone (no run): the batch scales the work, not the calls; and
    Session(workers=2) splits the batch-16 step the default keeps in the parent."""
    from tfplus.engine.executor import Executor
    from tfplus.runtime import get_runtime
    tg = _graph()
    ex = Executor(get_runtime("cpu"))
    pays = {b: workers._prepare(ex, 2, [tg.train_op, tg.loss], {t: np.empty(v.shape, v.dtype)
                                                               for t, v in _feeds(tg, 0, b).items()}).payoff
            for b in (16, 64)}
    assert pays[64].work > 3 * pays[16].work and pays[64].calls == pays[16].calls  # (the updates: not the batch)
    assert not pays[16].pays and pays[64].pays, pays
    _, pids, _, summary = _train(tg, 16, count=2, steps=2)
    assert len(pids) == 2 and summary == "training steps on 2 worker processes", summary


def test_tfplus_train_says_once_where_its_steps_run_and_a_checkpoint_keeps_the_default(tmp_path, capsys):
    ckpt = tmp_path / "ckpt"
    argv = ["train", "--synthetic", "--model", "lenet", "--batch-size", "16", "--no-eval", "--steps", "3",
            "--threads", "2", "--checkpoint-dir", str(ckpt)]
    assert main(argv) == 0
    out = capsys.readouterr()
    text = out.out + out.err
    assert text.count("training steps in this process: too small a step for the workers") == 1, text
    meta = tf.train.read_checkpoint_metadata(tf.train.latest_checkpoint(str(ckpt)))
    assert meta["options"]["workers"] is None, meta["options"]  # the rule, which a resumed run keeps
    assert main(argv[:-4] + ["--steps", "4", "--checkpoint-dir", str(ckpt), "--resume", "--workers", "2"]) != 0
    assert "--workers 2 differs from the checkpoint's default" in capsys.readouterr().err


def test_a_batch_norm_steps_rendezvous_are_its_statistics_passes_and_the_micro_batch_run():
    """Two training-mode batch norms: a forward and a backward statistics pass each, then the micro-batch run, five
    rendezvous, RUN_SECONDS each in the rule's cost (so this small step stays in the parent)."""
    g = tf.Graph()
    with g.as_default():
        x, y = tf.placeholder(tf.float32, [None, 32]), tf.placeholder(tf.int32, [None])
        h = x
        for i in range(2):
            h = tf.nn.relu(tf.layers.batch_normalization(tf.layers.dense(h, 32, name=f"dense{i}"), training=True,
                                                         name=f"norm{i}"))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=tf.layers.dense(h, 10)))
        with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
            train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
        init = tf.global_variables_initializer()
    rng = np.random.default_rng(0)
    feeds = {x: rng.standard_normal((16, 32)).astype(np.float32), y: rng.integers(0, 10, 16).astype(np.int32)}
    with tf.Session(graph=g, config=tf.ConfigProto(intra_op_parallelism_threads=2)) as sess:
        sess.run(init)
        sess.run([train, loss], feeds)
        summary, pids = sess.workers.summary(), sess.workers.pids()
    assert pids == [] and "cost ~" in summary and ", 5 rendezvous," in summary, summary
    cost = float(summary.split("cost ~")[1].split(" ms")[0]) / 1e3
    assert cost >= 5 * workers.RUN_SECONDS, summary
