"""Flower apps tfplus did not write (tests/federated/sweep_apps.py), in Flower's Simulation Engine (Ray), one
launch for all: every strategy Flower 1.42 ships runs on tfplus clients, and each result is its formula applied to
what the clients sent. One launch, because Ray's start-up is most of the cost on CI's 2 cores."""
import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr", reason="Flower is not installed: pip install \"tfplus[federated]\"")
pytest.importorskip("ray", reason="Flower's Simulation Engine needs Ray: pip install \"tfplus[federated]\"")
import sweep_apps as apps  # noqa: E402
from scipy import stats  # noqa: E402

from tfplus.federated import flower  # noqa: E402


@pytest.fixture(scope="module")
def results():
    """Runs the sweep's ServerApp and ClientApp with Flower's run_simulation, as its docs show, once."""
    os.environ["PYTHONPATH"] = os.pathsep.join([str(Path(apps.__file__).parent), os.environ.get("PYTHONPATH", "")])
    import ray
    run_simulation = flower._run_simulation()
    flower._start_ray(apps.FED)  # 2 CPUs' workers without TensorFlow (Flower's import of it: 5 s a worker)
    try:
        run_simulation(apps.serverapp, apps.clientapp, num_supernodes=apps.CLIENTS,
                       backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}})
    finally:
        ray.shutdown()
    return apps.RESULTS


def _case(results, name):
    got = results.get(name)
    assert got is not None, f"{name}: the ServerApp never ran it"
    assert "error" not in got, f"{name}: {got.get('error')}"
    return got


def _last(got):
    messages, replies = got["rounds"][-1]
    return messages, replies


@pytest.mark.parametrize("name", ["fedavg-named", "fedavg-listed", "fedavg-own-client", "fedprox", "fedavgm",
                                  "budget"])
def test_fedavgs_result_is_the_replies_mean_by_examples_and_central_evaluation_sees_it_learn(results, name):
    got = _case(results, name)
    _, replies = _last(got)
    assert len(replies) == apps.CLIENTS and not any(r["error"] for r in replies)
    # FedAvgM's first round with server_learning_rate 1: w0 - 1 * (w0 - mean) is the mean
    apps.check_weighted_mean(replies, got["final"], rtol=1e-5 if name != "fedavgm" else 1e-4)
    rounds = [r for r, _ in got["evaluated"]]
    assert rounds == list(range(len(got["rounds"]) + 1))
    assert got["evaluated"][-1][1] < got["evaluated"][0][1]  # the global model's test loss fell


def test_weights_keyed_by_name_come_back_by_name_and_a_listed_record_by_position(results):
    named, listed = _case(results, "fedavg-named"), _case(results, "fedavg-listed")
    assert _last(named)[1][0]["keys"] == named["names"]
    assert _last(listed)[1][0]["keys"] == [str(i) for i in range(len(listed["names"]))]

    def by_client(replies):
        return sorted(replies, key=lambda r: r["client"]["client"])
    for a, b in zip(by_client(named["rounds"][0][1]), by_client(listed["rounds"][0][1])):  # the same round 1
        for x, y in zip(a["arrays"], b["arrays"]):
            np.testing.assert_array_equal(x, y)


def test_fraction_train_samples_half_the_nodes(results):
    sent, replies = _last(_case(results, "fedavg-half"))
    assert sent == 2 and len(replies) == 2 and not any(r["error"] for r in replies)


def test_a_client_failing_in_round_2_is_left_out_of_that_rounds_mean(results):
    got = _case(results, "fedavg-fails-in-round-2")
    assert not any(r["error"] for r in got["rounds"][0][1])
    _, replies = got["rounds"][1]
    failed = [r["error"] for r in replies if r["error"]]
    assert len(replies) == apps.CLIENTS and len(failed) == 1 and "client 1: injected failure in round 2" in failed[0]
    apps.check_weighted_mean(replies, got["final"])


def test_fedmedian_and_fedtrimmedavg_are_their_order_statistics(results):
    for name, reduce in (("fedmedian", lambda a: np.median(a, axis=0)),
                         ("fedtrimmedavg", lambda a: stats.trim_mean(a, 0.25, axis=0))):
        got = _case(results, name)
        sent = apps.arrays_of(_last(got)[1])
        assert len(sent) == apps.CLIENTS
        for i, final in enumerate(got["final"]):
            want = reduce(np.stack([s[i].astype(np.float64) for s in sent]))
            np.testing.assert_allclose(final, want, rtol=1e-5, atol=1e-7, err_msg=f"{name} array {i}")


def test_krum_picks_one_clients_weights_and_multikrum_averages_two(results):
    krum = _case(results, "krum")
    sent = apps.arrays_of(_last(krum)[1])
    assert len(sent) == apps.CLIENTS
    assert any(all(np.array_equal(a, b) for a, b in zip(krum["final"], s)) for s in sent)
    multi = _case(results, "multikrum")
    _, replies = _last(multi)
    ok = [r for r in replies if r["error"] is None]
    assert len(ok) == apps.CLIENTS
    pairs = [(i, j) for i in range(len(ok)) for j in range(i + 1, len(ok))]
    errors = []
    for i, j in pairs:
        try:
            apps.check_weighted_mean([ok[i], ok[j]], multi["final"])
            break
        except AssertionError as e:
            errors.append(e)
    else:
        raise AssertionError(f"multikrum's result is no pair's mean: {errors[0]}")


def test_bulyans_result_lies_within_the_clients_weights(results):
    got = _case(results, "bulyan")
    sent = apps.arrays_of(_last(got)[1])
    assert len(sent) == apps.CLIENTS
    for i, final in enumerate(got["final"]):
        stack = np.stack([s[i] for s in sent])
        assert np.isfinite(final).all()
        assert (final >= stack.min(0) - 1e-6).all() and (final <= stack.max(0) + 1e-6).all(), f"array {i}"


def test_qfedavg_is_its_formula_on_the_clients_losses(results):
    """q-FedAvg (Li et al. 2020): with L = 1 / the clients' rate, delta_k = L (w - w_k) loss_k^q and
    h_k = q loss_k^(q-1) ||L (w - w_k)||^2 + L loss_k^q, the new weights are w - sum(delta_k) / sum(h_k)."""
    got = _case(results, "qfedavg")
    _, replies = _last(got)
    ok = [r for r in replies if r["error"] is None]
    assert len(ok) == apps.CLIENTS
    q, lipschitz = 0.2, 1 / apps.FED.lr
    deltas, h = [], 0.0
    for r in ok:
        grad = [lipschitz * (w0.astype(np.float64) - w) for w0, w in zip(got["start"], r["arrays"])]
        power = (r["loss"] + 1e-10) ** q
        deltas.append([g * power for g in grad])
        h += q * (r["loss"] + 1e-10) ** (q - 1) * sum(np.sum(g ** 2) for g in grad) + lipschitz * power
    for i, (w0, final) in enumerate(zip(got["start"], got["final"])):
        np.testing.assert_allclose(final, w0 - sum(d[i] for d in deltas) / h, rtol=1e-4, atol=1e-6, err_msg=str(i))


@pytest.mark.parametrize("name", ["fedadam", "fedadagrad", "fedyogi"])
def test_the_adaptive_server_optimizers_step_each_weight_by_at_most_eta_toward_the_mean(results, name):
    got = _case(results, name)
    _, replies = _last(got)
    sent = apps.arrays_of(replies)
    assert len(sent) == apps.CLIENTS
    n = np.array([r["n"] for r in replies if r["error"] is None])
    for i, (w0, final) in enumerate(zip(got["start"], got["final"])):
        mean = sum(w * s[i].astype(np.float64) for w, s in zip(n, sent)) / n.sum()
        step, toward = final.astype(np.float64) - w0, mean - w0
        assert np.abs(step).max() <= 0.01 * (1 + 1e-4), f"{name} array {i}"
        moved = np.abs(toward) > 1e-3
        assert (np.sign(step[moved]) == np.sign(toward[moved])).all(), f"{name} array {i}"


@pytest.mark.parametrize("name", ["dp-server-fixed", "dp-server-adaptive", "dp-client-fixed", "dp-client-adaptive"])
def test_differential_privacys_clipping_bounds_the_global_update(results, name):
    got = _case(results, name)
    _, replies = _last(got)
    sent = apps.arrays_of(replies)
    assert len(sent) == apps.CLIENTS
    # the same round unclipped (fedavg-listed: the same start, clients and seeds) moved further than the norm
    unclipped = apps.arrays_of(_case(results, "fedavg-listed")["rounds"][0][1])
    assert min(apps.norm(s, got["start"]) for s in unclipped) > 2 * apps.CLIP
    if name.startswith("dp-client"):  # the clients' mods clipped what they sent
        assert all(apps.norm(s, got["start"]) <= apps.CLIP * (1 + 1e-5) for s in sent)
    assert 0 < apps.norm(got["final"], got["start"]) <= apps.CLIP * (1 + 1e-5)


def test_a_budgeted_client_in_the_simulation_keeps_to_its_plan(results):
    _, replies = _last(_case(results, "budget"))
    assert len(replies) == apps.CLIENTS
    for r in replies:
        about = r["client"]
        assert 0 < about["peak_bytes"] <= apps.BUDGET and about["peak_bytes"] <= about["measured_peak_bytes"]
