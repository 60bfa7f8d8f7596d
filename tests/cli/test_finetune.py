"""Fine-tuning: var_list in minimize and Saver as in TF1 (the tf1 oracle), frozen layers get no gradient and
no slot, `tfplus train --init-from/--trainable/--fine-tune-last/--classes`, and the planner's view of it."""
from __future__ import annotations

import numpy as np
import pytest

import tfplus as tf
import tfplus.train  # noqa: F401
from tfplus import finetune
from tfplus.cli import main
from tfplus.graphs import get_model, training_graph

SMALL = ["--synthetic", "--model", "lenet", "--batch-size", "16", "--no-eval"]


# -- item 1: var_list as in TF1 ------------------------------------------------------------------------------
def _two_layer_net(api, x_value, values, var_list_names):
    """A 2-layer net in `api` (tfplus or tf.compat.v1); Momentum on the loss with var_list = the named variables.
    Returns (graph, {name: variable}, train_op, loss)."""
    g = api.Graph()
    with g.as_default():
        x = api.constant(x_value)
        vs = {}
        with api.variable_scope("layer1"):
            vs["layer1/w"] = api.Variable(values["layer1/w"], name="w")
            vs["layer1/b"] = api.Variable(values["layer1/b"], name="b")
            h = api.nn.relu(api.matmul(x, vs["layer1/w"]) + vs["layer1/b"])
        with api.variable_scope("layer2"):
            vs["layer2/w"] = api.Variable(values["layer2/w"], name="w")
            vs["layer2/b"] = api.Variable(values["layer2/b"], name="b")
            y = api.matmul(h, vs["layer2/w"]) + vs["layer2/b"]
        loss = api.reduce_mean(api.square(y))
        train_op = api.train.MomentumOptimizer(0.1, 0.9).minimize(loss, var_list=[vs[n] for n in var_list_names])
    return g, vs, train_op, loss


def _values(seed=0):
    rng = np.random.default_rng(seed)
    return {"layer1/w": rng.standard_normal((3, 4)).astype(np.float32),
            "layer1/b": rng.standard_normal(4).astype(np.float32),
            "layer2/w": rng.standard_normal((4, 2)).astype(np.float32),
            "layer2/b": rng.standard_normal(2).astype(np.float32)}


def _reachable(fetch) -> set:
    """Every op the fetch depends on (data and control inputs): what a session runs for it."""
    seen, stack = set(), [fetch]
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        stack += [t.op for t in op.inputs] + list(op.control_inputs)
    return seen


@pytest.mark.parametrize("names", [["layer2/w", "layer2/b"], ["layer1/w"]], ids=["top", "bottom_weight"])
def test_minimize_var_list_matches_tf1(tf1, names):
    x = np.random.default_rng(1).standard_normal((5, 3)).astype(np.float32)
    values = _values()
    results = []
    for api in (tf, tf1):
        g, vs, train_op, loss = _two_layer_net(api, x, values, names)
        with g.as_default():
            init = api.global_variables_initializer()
            slots = sorted(v.op.name for v in api.global_variables() if v.op.name not in vs)
        with api.Session(graph=g) as sess:
            sess.run(init)
            for _ in range(3):
                sess.run(train_op)
            results.append((sess.run({n: v for n, v in vs.items()}), slots))
    (ours, our_slots), (theirs, their_slots) = results
    assert our_slots == their_slots == sorted(f"{n}/Momentum" for n in names)   # slots only for var_list
    for n in vs:
        np.testing.assert_allclose(ours[n], theirs[n], rtol=1e-5, atol=1e-6)
        assert np.array_equal(ours[n], values[n]) == (n not in names)          # the others never move


def test_frozen_layers_get_no_gradient_computation():
    x = np.ones((5, 3), np.float32)
    g, vs, train_op, _ = _two_layer_net(tf, x, _values(), ["layer2/w", "layer2/b"])
    ran = {op.name for op in _reachable(train_op)}
    grads = [n for n in ran if n.startswith("gradients/")]
    assert grads, "the top layer's gradients run"
    # Nothing below the lowest trainable layer is differentiated: no gradient op of layer1 (not even d/dh).
    assert not [n for n in grads if n.startswith("gradients/layer1/")]
    # ... and no d/dh, the gradient flowing into layer1 (h is (5, 4); d/dy is (5, 2), d/dw2 (4, 2)).
    shapes = {op.name: [t.shape.as_list() for t in op.outputs] for op in _reachable(train_op)}
    assert not [n for n in grads if [5, 4] in shapes[n]], grads


def test_saver_var_list_saves_and_restores_only_those_as_tf1(tf1, tmp_path):
    keys = []
    for api, folder in ((tf, tmp_path / "ours"), (tf1, tmp_path / "tf")):
        g, vs, _, _ = _two_layer_net(api, np.ones((2, 3), np.float32), _values(), ["layer2/w"])
        with g.as_default():
            saver = api.train.Saver(var_list=[vs["layer1/w"], vs["layer2/b"]])
            init = api.global_variables_initializer()
        folder.mkdir()
        with api.Session(graph=g) as sess:
            sess.run(init)
            path = saver.save(sess, str(folder / "m"))
        keys.append(sorted(k for k, _ in api.train.list_variables(path)))
    assert keys[0] == keys[1] == ["layer1/w", "layer2/b"]
    # Restoring the subset leaves the other variables as the session has them.
    g, vs, _, _ = _two_layer_net(tf, np.ones((2, 3), np.float32), _values(seed=5), ["layer2/w"])
    with g.as_default():
        saver = tf.train.Saver(var_list=[vs["layer1/w"], vs["layer2/b"]])
        init = tf.global_variables_initializer()
    with tf.Session(graph=g) as sess:
        sess.run(init)
        saver.restore(sess, str(tmp_path / "ours" / "m"))
        got = sess.run(dict(vs))
    np.testing.assert_array_equal(got["layer1/w"], _values()["layer1/w"])
    np.testing.assert_array_equal(got["layer2/w"], _values(seed=5)["layer2/w"])


# -- item 2: layers, selection, init_from --------------------------------------------------------------------
def _mentee_graph(**kw):
    return training_graph(get_model("mentee").build, total_steps=10, **kw)


def test_layers_and_selection_of_mentee():
    tg = _mentee_graph()
    with tg.graph.as_default():
        every = tf.trainable_variables()
    assert [n for n, _ in finetune.model_layers(every)] == \
        ["conv1", "conv2", "conv3", "conv4", "conv5", "fc1", "fc2", "fc3"]
    assert [v.op.name for v in finetune.select_trainable(every, fine_tune_last=2)] == \
        ["fc2/weights", "fc2/biases", "fc3/weights", "fc3/biases"]
    assert [v.op.name for v in finetune.select_trainable(every, trainable="^conv5/w")] == ["conv5/weights"]
    assert finetune.select_trainable(every) == every
    for kw, message in [({"fine_tune_last": 0}, "out of range"), ({"fine_tune_last": 9}, "give 1..8"),
                        ({"trainable": "nomatch"}, "matches no trainable variable"),
                        ({"trainable": "("}, "not a valid regular expression"),
                        ({"trainable": "fc", "fine_tune_last": 1}, "not both")]:
        with pytest.raises(ValueError, match=message):
            finetune.select_trainable(every, **kw)


def test_training_graph_var_list_creates_slots_only_for_the_chosen():
    tg = _mentee_graph(var_list=lambda vs: finetune.select_trainable(vs, fine_tune_last=1))
    with tg.graph.as_default():
        slots = sorted(v.op.name for v in tf.global_variables() if v.op.name.endswith("/Momentum"))
    assert slots == ["fc3/biases/Momentum", "fc3/weights/Momentum"]


def _pretrained(tmp_path, *extra):
    ckpt = tmp_path / "pre"
    assert main(["train", *SMALL, "--steps", "2", "--classes", "0-4", "--checkpoint-dir", str(ckpt), *extra]) == 0
    return ckpt


def test_init_from_fine_tune_last_trains_only_the_last_layer(tmp_path, capsys):
    pre = _pretrained(tmp_path)
    capsys.readouterr()
    out = tmp_path / "ft"
    assert main(["train", *SMALL, "--steps", "3", "--classes", "5-9", "--init-from", str(pre),
                 "--fine-tune-last", "1", "--widths", "6,8", "--checkpoint-dir", str(out)]) == 0
    err = capsys.readouterr().err
    assert "restored 7 of 10 model variables" in err
    assert "not restored: conv2/weights (shape mismatch: checkpoint [5, 5, 6, 16], model [5, 5, 6, 8])" in err
    assert "training 2 of 10 variables (layers fc3)" in err
    before, after = tf.train.latest_checkpoint(str(pre)), tf.train.latest_checkpoint(str(out))
    names = dict(tf.train.list_variables(after))
    assert "fc3/weights/Momentum" in names and "fc2/weights/Momentum" not in names
    for frozen in ("conv1/weights", "fc2/weights", "fc2/biases"):   # restored, and not trained
        np.testing.assert_array_equal(tf.train.load_variable(after, frozen), tf.train.load_variable(before, frozen))
    assert not np.array_equal(tf.train.load_variable(after, "fc3/weights"),
                              tf.train.load_variable(before, "fc3/weights"))
    # The run's recipe keeps its fine-tuning: eval tests on its classes, resume keeps it.
    assert main(["eval", "--checkpoint", str(out)]) == 0
    assert main(["train", *SMALL, "--steps", "3", "--checkpoint-dir", str(out), "--resume",
                 "--fine-tune-last", "2"]) == 2
    assert "--fine-tune-last 2 differs from the checkpoint's 1" in capsys.readouterr().err


def test_classes_filter_keeps_labels():
    from tfplus.data import synthetic
    from tfplus.trainer import only_classes, parse_classes
    assert parse_classes("0-2,7") == (0, 1, 2, 7)
    d = only_classes(synthetic(200, 100, seed=0), (5, 6))
    assert set(d.train_labels) == {5, 6} and set(d.test_labels) == {5, 6}
    assert len(d.train_images) == len(d.train_labels)


@pytest.mark.parametrize("argv, message", [
    (["--fine-tune-last", "6"], "--fine-tune-last 6 is out of range: the model has 5 layers"),
    (["--trainable", "^nope"], "--trainable '^nope' matches no trainable variable"),
    (["--init-from", "{tmp}/missing"], "--init-from {tmp}/missing: cannot read the checkpoint"),
    (["--init-from", "{tmp}/corrupt"], "--init-from {tmp}/corrupt: cannot read the checkpoint"),
    (["--init-from", "{tmp}"], "the folder holds no checkpoint"),
    (["--classes", "3-1"], "argument --classes: '3-1'"),
    (["--classes", "7-12"], "argument --classes: '7-12': the classes are numbered 0..9"),
    (["--trainable", "fc", "--fine-tune-last", "1"], "not allowed with argument"),
])
def test_bad_fine_tuning_options_are_one_clear_line(argv, message, tmp_path, capsys):
    (tmp_path / "corrupt").write_bytes(b"not a checkpoint at all")
    argv = [a.format(tmp=tmp_path) for a in argv]
    assert main(["train", *SMALL, "--steps", "1", *argv]) == 2
    assert message.format(tmp=tmp_path) in capsys.readouterr().err


def test_init_from_matches_by_name_and_shape(tmp_path):
    g, vs, _, _ = _two_layer_net(tf, np.ones((2, 3), np.float32), _values(), ["layer2/w"])
    with g.as_default():
        saver = tf.train.Saver(var_list=[vs["layer1/w"], vs["layer2/w"]])
        init = tf.global_variables_initializer()
    with tf.Session(graph=g) as sess:
        sess.run(init)
        saver.save(sess, str(tmp_path / "m"))
    g2 = tf.Graph()
    with g2.as_default():
        mine = [tf.Variable(np.zeros((3, 4), np.float32), name="layer1/w"),
                tf.Variable(np.zeros((4, 3), np.float32), name="layer2/w"),
                tf.Variable(np.zeros(4, np.float32), name="layer1/b")]
        found = finetune.init_from(mine, str(tmp_path / "m"))
        init = tf.global_variables_initializer()
    assert found.restored == ["layer1/w"]
    assert found.skipped == [("layer2/w", "shape mismatch: checkpoint [4, 2], model [4, 3]"), ("layer1/b", "missing")]
    with tf.Session(graph=g2) as sess:
        sess.run(init)
        found.restore(sess)
        np.testing.assert_array_equal(sess.run(mine[0]), _values()["layer1/w"])
        assert not sess.run(mine[1]).any()


# -- item 3: the planner sees the pruned step ----------------------------------------------------------------
TINY = {"conv_widths": (4, 4, 8, 8, 8), "fc_widths": (16, 8)}


def _tiny_step(last=None):
    pick = None if last is None else (lambda vs: finetune.select_trainable(vs, fine_tune_last=last))
    tg = training_graph(get_model("mentee").build, total_steps=10, model_kwargs=TINY, var_list=pick)
    rng = np.random.default_rng(0)
    feeds = {tg.images: rng.standard_normal((8, 3, 32, 32)).astype(np.float32),
             tg.labels: rng.integers(0, 10, 8).astype(np.int32)}
    return tg, feeds


def test_plan_of_a_fine_tuned_step_has_no_backward_below_the_trained_layers():
    from tfplus import planner
    plans = {}
    for last in (None, 1, 3):
        tg, feeds = _tiny_step(last)
        shapes = {t: v.shape for t, v in feeds.items()}
        plans[last] = planner.plan([tg.train_op, tg.loss], shapes, "cpu", graph=tg.graph)
        names = [b.name for b in plans[last].buffers]
        backward = {n.split("/")[1] for n in names if n.startswith("gradients/")}
        trained = {"fc3"} if last == 1 else {"fc1", "fc2", "fc3"} if last == 3 else None
        if trained is not None:   # gradient buffers of the trained layers and of the loss only
            assert backward - {"loss", "grad_ys:0"} <= trained and "fc3" in backward, sorted(backward)
    assert plans[1].slot_bytes < plans[3].slot_bytes < plans[None].slot_bytes
    assert plans[1].peak_bytes < plans[3].peak_bytes < plans[None].peak_bytes


def test_fine_tuned_step_under_a_budget_matches_the_unconstrained_one():
    """Micro-batching a fine-tuned step (no batch norm) is exact: same loss and weights as without a budget."""
    from tfplus import planner
    from tfplus.engine.rewrite import optimize
    results = []
    for budget in (None, "smallest"):
        tg, feeds = _tiny_step(1)
        if budget == "smallest":  # of the step the session runs: the rewritten one (tfplus.engine.rewrite)
            r = optimize(tg.graph, [tg.train_op, tg.loss], list(feeds))
            shapes = {r.element[t]: v.shape for t, v in feeds.items()}
            budget = planner.smallest_plan([r.element[tg.train_op], r.element[tg.loss]], shapes, "cpu",
                                           graph=r.graph).peak_bytes
        with tf.Session(graph=tg.graph, memory_budget=budget) as sess:
            sess.run(tg.init_op)
            loss = [sess.run([tg.train_op, tg.loss], feeds)[1] for _ in range(2)]
            with tg.graph.as_default():
                w = sess.run(tf.trainable_variables())
            plans = sess.memory_plans
            # (whole-step micro-batches, or those of a streamed prefix: planner.stream)
            results.append((loss, w, max(max(p.microbatches, p.stream_microbatches) for p in plans) if plans else 1))
    assert results[0][2] == 1 and results[1][2] > 1   # the budget micro-batched the step
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-5)
    for a, b in zip(results[0][1], results[1][1]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_plan_cli_fine_tune_last(capsys):
    from tfplus.cli import main as cli
    assert cli(["plan", "--model", "lenet", "--batch-size", "8", "--fine-tune-last", "1", "--json"]) == 0
    import json
    out = json.loads(capsys.readouterr().out)
    assert out["fine_tune_last"] == 1
    assert cli(["plan", "--model", "lenet", "--batch-size", "8", "--json"]) == 0
    full = json.loads(capsys.readouterr().out)
    assert out["peak_bytes"] < full["peak_bytes"]
    assert cli(["plan", "--model", "lenet", "--fine-tune-last", "7"]) == 2
    assert "--fine-tune-last 7 is out of range: the model has 5 layers" in capsys.readouterr().err


# -- item 4: batch statistics and micro-batching -------------------------------------------------------------
def _moments_net():
    """Dense -> a hand-written batch norm (tf.nn.moments over the batch) -> dense -> mean cross-entropy."""
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 6])
        y = tf.placeholder(tf.int32, [None])
        h = tf.matmul(x, tf.Variable(np.ones((6, 8), np.float32) / 6))
        mean, var = tf.nn.moments(h, [0])   # squeezed: (8,), broadcast back onto the rows
        h = (h - mean) / tf.sqrt(var + 1e-3)
        logits = tf.matmul(h, tf.Variable(np.ones((8, 3), np.float32) / 8))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    return g, x, y, [train_op, loss]


def test_a_batch_mean_kept_for_the_rows_micro_batches_in_statistics_passes():
    from tfplus import planner
    g, x, y, fetches = _moments_net()
    shapes = {x: (16, 6), y: (16,)}
    split = planner.plan(fetches, shapes, graph=g, force=(2, 1))  # planner.crossbatch: the mean, then the rest
    assert split.statistics and split.statistics[0][0].name == "moments/Mean:0"
    assert not planner.plan(fetches, shapes, graph=g).notes
    # The loss's own mean over the batch (no kept axis) is what micro-batching averages exactly.
    tg, feeds = _tiny_step(1)
    p = planner.plan([tg.train_op, tg.loss], {t: v.shape for t, v in feeds.items()}, graph=tg.graph, force=(2, 1))
    assert p.microbatches == 2 and not p.notes


# -- frozen batch norm runs in inference mode --------------------------------------------------------------
def _mobilenet_step(last):
    from tfplus.graphs.mobilenet import mobilenet
    tg = training_graph(mobilenet, total_steps=10, seed=0, schedule="const", image_shape=(3, 8, 8),
                        model_kwargs={"conv_widths": (4, 8, 8)},     # conv0, block1, block2, logits
                        var_list=lambda vs: finetune.select_trainable(vs, fine_tune_last=last))
    rng = np.random.default_rng(0)
    feeds = {tg.images: rng.standard_normal((6, 3, 8, 8)).astype(np.float32),
             tg.labels: rng.integers(0, 10, 6).astype(np.int32)}
    return tg, feeds


def test_frozen_batch_norm_keeps_its_moving_statistics_and_the_trained_one_updates_them():
    tg, feeds = _mobilenet_step(2)                                   # block2 and logits train
    with tg.graph.as_default():
        moving = {v.op.name: v for v in tf.global_variables() if "/moving_" in v.op.name}
    with tf.Session(graph=tg.graph) as sess:
        sess.run(tg.init_op)
        before = sess.run(moving)
        sess.run(tg.train_op, feeds)
        after = sess.run(moving)
    changed = sorted({n.rsplit("/", 1)[0] for n in moving if not np.array_equal(before[n], after[n])})
    assert changed == ["block2/dw/bn", "block2/pw/bn"]               # conv0/bn, block1/*/bn are frozen


def test_frozen_batch_norm_outputs_equal_inference_mode():
    from tfplus.graphs.mobilenet import mobilenet
    tg, feeds = _mobilenet_step(1)                                   # only logits trains: every BN is frozen
    with tg.graph.as_default():
        with tf.variable_scope(tf.get_variable_scope(), reuse=True), tf.name_scope("check"):
            inference = mobilenet(tg.images, conv_widths=(4, 8, 8), training=False)
            batch_stats = mobilenet(tg.images, conv_widths=(4, 8, 8), training=True)
        moving = [v for v in tf.global_variables() if v.op.name.startswith("block1/pw/bn/moving_")]
    with tf.Session(graph=tg.graph) as sess:
        sess.run(tg.init_op)
        # Moving statistics that are not the initial (0, 1), so inference mode differs from batch statistics.
        for v in moving:
            sess.run(v.assign(np.linspace(0.5, 1.5, v.shape.as_list()[0]).astype(np.float32)))
        logits, want, other = sess.run([tg.logits, inference, batch_stats], {tg.images: feeds[tg.images]})
    np.testing.assert_allclose(logits, want, rtol=1e-5, atol=1e-6)
    assert not np.allclose(logits, other, atol=1e-3)


def test_a_fine_tuned_step_with_frozen_batch_norm_may_micro_batch():
    """Inference-mode batch norm reads no batch statistics: micro-batching the step is exact again."""
    from tfplus import planner
    tg, feeds = _mobilenet_step(1)
    p = planner.plan([tg.train_op, tg.loss], {t: v.shape for t, v in feeds.items()}, graph=tg.graph, force=(2, 1))
    assert p.microbatches == 2


# -- convolutions below the trained layers: smaller scratch, same results ------------------------------------
def test_forward_only_convolutions_get_the_scratch_divisor():
    from tfplus.planner.chunking import SCRATCH_ATTR
    for last, shrunk in [(1, {"conv1", "conv2", "conv3", "conv4", "conv5"}), (4, {"conv1", "conv2", "conv3", "conv4"}),
                         (None, set())]:
        tg, _ = _tiny_step(last)
        marked = {op.name.split("/")[0] for op in tg.graph.get_operations()
                  if op.type == "Conv2D" and op.attrs.get(SCRATCH_ATTR) == finetune.FORWARD_SCRATCH_DIVISOR}
        assert marked == shrunk, last


def test_fine_tune_plan_without_a_budget_is_at_most_half_of_full_training():
    """The issue's bar: Mentee, batch 128, --fine-tune-last 1, no budget, on the cpu device."""
    from tfplus import planner
    peaks = {}
    for last in (None, 1):
        pick = None if last is None else (lambda vs: finetune.select_trainable(vs, fine_tune_last=1))
        tg = training_graph(get_model("mentee").build, total_steps=10, var_list=pick)
        peaks[last] = planner.plan([tg.train_op, tg.loss], {tg.images: (128, 3, 32, 32), tg.labels: (128,)},
                                   "cpu", graph=tg.graph).peak_bytes
    assert peaks[1] <= peaks[None] / 2, peaks


def test_the_scratch_divisor_changes_no_result():
    """Batch 64: conv1's im2col (64 x 1024 x 27 floats) is cut into more pieces under the divisor."""
    from tfplus import planner
    from tfplus.planner.chunking import SCRATCH_ATTR
    losses, peaks = [], []
    for keep in (True, False):
        tg, _ = _tiny_step(1)
        rng = np.random.default_rng(0)
        feeds = {tg.images: rng.standard_normal((64, 3, 32, 32)).astype(np.float32),
                 tg.labels: rng.integers(0, 10, 64).astype(np.int32)}
        if not keep:
            for op in tg.graph.get_operations():
                op.attrs.pop(SCRATCH_ATTR, None)
        peaks.append(planner.plan([tg.train_op, tg.loss], {t: v.shape for t, v in feeds.items()}, "cpu",
                                  graph=tg.graph).peak_bytes)
        with tf.Session(graph=tg.graph, memory_budget="1GB") as sess:
            sess.run(tg.init_op)
            losses.append([sess.run([tg.train_op, tg.loss], feeds)[1] for _ in range(2)])
    assert peaks[0] < peaks[1]
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-6)
