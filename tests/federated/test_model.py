"""tfplus.federated's framework side, without Flower: the weights API (one session run each way), the optimizer
reset, the round-driven learning rate, FedProx's proximal step, partitions, and sharded CIFAR-10 reading."""
import tracemalloc

import numpy as np
import pytest

import tfplus as tf
from tfplus import data as tfdata
from tfplus import trainer
from tfplus.data import cifar10
from tfplus.federated import FederatedModel, partition
from tfplus.federated.model import load_weights, pytorch_layout, save_weights

N_TRAIN, N_TEST = 200, 40  # a small synthetic CIFAR-10 in the binary format: 5 files of 40, a test file of 40


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return cifar10.write_binary_batches(tmp_path_factory.mktemp("data"), tfdata.synthetic(N_TRAIN, N_TEST, seed=3))


def _model(proximal=False, measure=False, **kw):
    cfg = trainer.TrainConfig(model="lenet", batch_size=16, **kw)
    return FederatedModel(cfg, steps_per_round=5, rounds=2, cpus=1, proximal=proximal, measure=measure)


def test_weights_round_trip_exactly_in_one_run_each():
    m = _model(synthetic=True)
    rng = np.random.default_rng(0)
    sent = {k: rng.standard_normal(v.shape).astype(v.dtype) for k, v in m.get_weights().items()}
    runs, run = [], m.sess.run
    m.sess.run = lambda *a, **k: runs.append(a) or run(*a, **k)
    m.set_weights(sent)
    got = m.get_weights()
    assert got.keys() == sent.keys() and all(np.array_equal(got[k], sent[k]) for k in sent)
    assert len(runs) == 2  # one session run assigns them all, one reads them all
    with pytest.raises(ValueError, match="conv1/weights"):
        m.set_weights({**sent, "conv1/weights": sent["conv1/weights"][:1]})
    with pytest.raises(ValueError, match="missing"):
        m.set_weights({k: v for k, v in sent.items() if k != "fc3/biases"})


def test_reset_optimizer_keeps_weights_and_sets_the_step():
    m = _model(synthetic=True)
    ds = tfdata.synthetic(64, 16)
    m.train(ds, steps=3, server_round=1)
    before = m.get_weights()
    m.reset_optimizer(global_step=7)
    after = m.get_weights()
    assert all(np.array_equal(before[k], after[k]) for k in before)
    assert int(m.sess.run(m.tg.global_step)) == 7
    slots = [v for v in m.tg.graph.get_collection(tf.GraphKeys.GLOBAL_VARIABLES) if "Momentum" in v.op.name]
    assert slots and all(not np.any(s) for s in m.sess.run(slots))


def test_learning_rate_follows_the_server_round():
    m = _model(synthetic=True, warmup_steps=0, schedule="cosine", lr=0.05)
    m.reset_optimizer((1 - 1) * 5)
    first = float(m.sess.run(m.tg.learning_rate))
    m.reset_optimizer((2 - 1) * 5)
    second = float(m.sess.run(m.tg.learning_rate))
    assert first == pytest.approx(0.05) and second < first  # round 2 goes on down the cosine, not from its top


def test_fedprox_pulls_the_local_model_toward_the_global_one():
    ds, moved = tfdata.synthetic(64, 16), []
    for mu in (0.0, 5.0):
        m = _model(synthetic=True, proximal=True)
        start = m.get_weights()
        m.set_weights(start)  # the round's global weights: the proximal term's anchor
        m.train(ds, steps=5, server_round=2, proximal_mu=mu)
        end = m.get_weights()
        moved.append(sum(float(np.sum((end[k] - start[k]) ** 2)) for k in start))
    assert 0 < moved[1] < moved[0]


def test_partitions_are_deterministic_disjoint_and_whole():
    labels = np.repeat(np.arange(10), 30)
    for spec in ("iid", "dirichlet:0.5", "classes:2"):
        parts = partition(labels, 5, spec, seed=1)
        again = partition(labels, 5, spec, seed=1)
        assert all(np.array_equal(a, b) for a, b in zip(parts, again)), spec
        joined = np.concatenate(parts)
        assert len(joined) == len(np.unique(joined)) == len(labels), spec
    assert [len(np.unique(labels[p])) for p in partition(labels, 5, "classes:2", 0)] == [2] * 5
    assert not all(np.array_equal(a, b) for a, b in zip(partition(labels, 4, "iid", 1),
                                                         partition(labels, 4, "iid", 2)))
    with pytest.raises(ValueError, match="dirichlet:ALPHA"):
        partition(labels, 4, "dirichlet:-1")


def test_a_shard_reads_only_its_records(data_dir):
    full = tfdata.read_batches(data_dir, records_per_file=N_TEST)
    train_labels, test_labels = cifar10.read_labels(data_dir)
    assert np.array_equal(train_labels, full.train_labels) and np.array_equal(test_labels, full.test_labels)
    idx = np.array([0, 39, 40, 123, 199])
    shard = cifar10.read_shard(data_dir, idx, np.array([5]))
    assert np.array_equal(shard.train_images, full.train_images[idx])
    assert np.array_equal(shard.train_labels, full.train_labels[idx])
    assert np.array_equal(shard.test_images, full.test_images[[5]])


def test_a_client_forks_no_more_step_workers_than_its_cpus(monkeypatch):
    monkeypatch.setenv("TFPLUS_WORKERS", "4")
    monkeypatch.setenv("TFPLUS_NUM_THREADS", "4")
    m = _model(synthetic=True)  # cpus=1
    assert (m.cfg.threads, m.cfg.workers, m.sess.workers) == (1, 1, None)


def test_only_a_fedprox_model_holds_a_copy_of_the_weights():
    """FedProx's anchors are a second copy of the model: a client of any other strategy does without them."""
    def variable_bytes(m):
        return sum(int(np.prod(v.shape.as_list())) * 4 for v in m.tg.graph.get_collection(tf.GraphKeys.LOCAL_VARIABLES))
    plain, prox = _model(synthetic=True), _model(synthetic=True, proximal=True)
    weights = sum(w.nbytes for w in plain.get_weights().values())
    assert variable_bytes(prox) - variable_bytes(plain) == weights
    with pytest.raises(ValueError, match="proximal_mu=0.5.*proximal=True"):
        plain.train(tfdata.synthetic(32, 8), steps=1, proximal_mu=0.5)


def test_a_measured_model_plans_its_step_untraced_and_holds_that_plan_to_the_byte(monkeypatch):
    """measure=True: the training step is planned before tracemalloc starts (tracing slows the planner's search
    about tenfold: a budgeted client's round took 185 s instead of 7 on the shared box), and the session still
    holds that very plan, to the byte, under the trace (measure_step, fed arrays made before the trace as it
    needs). The round's own measured step (the pipeline's batches alive beside it) is at least the plan's peak."""
    from modelcheck import assert_measured_is_planned

    from tfplus.engine import step as engine_step
    from tfplus.engine.memory import measure_step
    made = []
    make_plan = engine_step.Step.make_plan
    monkeypatch.setattr(engine_step.Step, "make_plan", lambda step: made.append(
        (step, make_plan(step), tracemalloc.is_tracing())) or made[-1][1])
    shard = tfdata.synthetic(64, 16)
    with tfdata.train_batches(shard, 16, seed=1, augment=False, data_format="NCHW") as batches:
        x, y = next(iter(batches))  # (before the trace: a fed array's allocation must not be traced)
    assert not tracemalloc.is_tracing()
    try:
        m = _model(synthetic=True, memory_budget=2_000_000, measure=True)
        assert tracemalloc.is_tracing()
        out = m.train(shard, steps=3, measure=True)
        [(step, plan, traced)] = made
        assert not traced and step.plan is plan and m.peak_bytes() == plan.peak_bytes
        assert_measured_is_planned(measure_step(m.sess, m.sums.step_op, m._feed(x, y, 0.0, None)), plan)
    finally:
        tracemalloc.stop()
    assert plan.peak_bytes <= out["measured_peak_bytes"] < plan.peak_bytes + 4_000_000
    assert np.isfinite(out["loss"]) and "measured_peak_bytes" not in m.train(shard, steps=2)


def _torch_layout_mentee(w: dict, x: np.ndarray, pools=(1, 3, 4)) -> np.ndarray:
    """Mentee's logits computed as PyTorch's layers do, in float64 NumPy: nn.Conv2d (OIHW filters, padding 1) +
    ReLU, nn.MaxPool2d(2) after the pooled layers, nn.Flatten (C, H, W order), nn.Linear (x @ W.T + b)."""
    convs = sorted({k.split("/")[0] for k in w if k.startswith("conv")}, key=lambda s: int(s[4:]))
    dense = sorted({k.split("/")[0] for k in w if k.startswith("fc")}, key=lambda s: int(s[2:]))
    for i, name in enumerate(convs):
        windows = np.lib.stride_tricks.sliding_window_view(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3),
                                                           axis=(2, 3))  # (N, C, H, W, 3, 3)
        x = np.einsum("nchwij,ocij->nohw", windows, w[f"{name}/weights"]) + w[f"{name}/biases"][:, None, None]
        x = np.maximum(x, 0)
        if i in pools:
            n, c, h, wd = x.shape
            x = x.reshape(n, c, h // 2, 2, wd // 2, 2).max(axis=(3, 5))
    x = x.reshape(len(x), -1)
    for i, name in enumerate(dense):
        x = x @ w[f"{name}/weights"].T + w[f"{name}/biases"]
        x = np.maximum(x, 0) if i < len(dense) - 1 else x
    return x


def test_exported_weights_in_pytorch_layout_give_tfplus_logits(tmp_path):
    """The .npz a PyTorch peer starts from (benchmarks/torch_federated.py): keyed by variable name, read back
    without pickles, and in PyTorch's layout (pytorch_layout) the same network as tfplus's, logit for logit."""
    m = FederatedModel(trainer.TrainConfig(model="mentee", conv_widths=(4, 4, 8, 8, 8), fc_widths=(16, 8),
                                           batch_size=4, synthetic=True), steps_per_round=1, rounds=1, cpus=1)
    rng = np.random.default_rng(1)  # random biases too, so a bias in the wrong place shows
    m.set_weights({k: (rng.standard_normal(v.shape) * 0.3).astype(np.float32) for k, v in m.get_weights().items()})
    save_weights(str(tmp_path / "w.npz"), m.get_weights())
    loaded = load_weights(str(tmp_path / "w.npz"))
    assert list(loaded) == m.names and all(np.array_equal(loaded[k], v) for k, v in m.get_weights().items())
    torch_w = pytorch_layout(loaded)
    assert torch_w["conv2/weights"].shape == (4, 4, 3, 3) and torch_w["fc1/weights"].shape == (16, 8 * 4 * 4)
    x = rng.standard_normal((4, 3, 32, 32)).astype(np.float32)
    assert m.tg.raw_images is None
    ours = m.sess.run(m.tg.logits, {m.tg.images: x})
    mirror = _torch_layout_mentee({k: v.astype(np.float64) for k, v in torch_w.items()}, x.astype(np.float64))
    np.testing.assert_allclose(ours, mirror, rtol=1e-4, atol=1e-4 * np.abs(mirror).max())
    assert pytorch_layout({"dw/depthwise_weights": np.zeros((3, 3, 5, 1))})["dw/depthwise_weights"].shape == \
        (5, 1, 3, 3)


def test_local_steps_read_nothing_back_until_the_round_ends():
    """A local step runs the trainer's step (RunningSums: train_op and the device's loss and accuracy sums) and
    fetches nothing, so the host can queue the next one; the round's means, read once, are those of the steps the
    loop fetching loss and accuracy each step takes, with the same weights after."""
    ds, steps, seed = tfdata.synthetic(64, 16), 4, 11
    m, twin = _model(synthetic=True), _model(synthetic=True)
    runs, run = [], m.sess.run
    m.sess.run = lambda fetches, *a, **k: runs.append(fetches) or run(fetches, *a, **k)
    out = m.train(ds, steps=steps, server_round=2, seed=seed)
    assert runs.count(m.sums.step_op) == steps and runs[-1] is m.sums.var  # the one read, at the end
    assert all(f is m.sums.step_op for f in runs[2:-1])
    twin.reset_optimizer(5)
    tg, fetched = twin.tg, []
    with tfdata.train_batches(ds, 16, seed=seed, data_format=twin.cfg.data_format) as batches:
        for _, (x, y) in zip(range(steps), batches):
            fetched.append(twin.sess.run([tg.train_op, tg.loss, tg.accuracy], {tg.images: x, tg.labels: y})[1:])
    assert out["loss"] == pytest.approx(np.mean([f[0] for f in fetched]), rel=1e-6)
    assert out["accuracy"] == pytest.approx(np.mean([f[1] for f in fetched]), rel=1e-6)
    mine, theirs = m.get_weights(), twin.get_weights()
    assert all(np.array_equal(mine[k], theirs[k]) for k in mine)
