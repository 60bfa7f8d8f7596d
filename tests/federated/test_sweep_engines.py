"""A Flower app tfplus did not write (tests/federated/outsider_app.py) through `flwr run`, on Flower's two engines,
on 127.0.0.1 with runtime dependency installation off: the Deployment Engine (a SuperLink, one `tfplus federated
supernode` and one Flower `flower-supernode`, as separate processes) and the Simulation Engine behind a SuperLink
started with --simulation. Each launch is checked once for all it shows: the loss falls, the global model is its
round's replies' mean by examples, and its checkpoint restores in tfplus and reads the same in TensorFlow."""
import importlib.util
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr", reason="Flower is not installed: pip install \"tfplus[federated]\"")

import tfplus as tf  # noqa: E402

HERE = Path(__file__).resolve().parent
BENCH = HERE.parents[1] / "benchmarks" / "bench_federated_deploy.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_federated_deploy", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _app(folder: Path, serverapp: str, clientapp: str, out: Path) -> Path:
    """The app folder `flwr run` takes: a pyproject.toml as Flower's templates write it and the app's module."""
    folder.mkdir(parents=True)
    shutil.copy(HERE / "outsider_app.py", folder / "outsider_app.py")
    (folder / "pyproject.toml").write_text("\n".join([
        "[project]", 'name = "outsider-app"', 'version = "1.0.0"', 'dependencies = ["tfplus[federated]"]', "",
        "[tool.flwr.app]", 'publisher = "outsider"', "", "[tool.flwr.app.components]",
        f'serverapp = "outsider_app:{serverapp}"', f'clientapp = "outsider_app:{clientapp}"', "",
        "[tool.flwr.app.config]", "clients = 2", "rounds = 2", f"out = {json.dumps(str(out))}", ""]))
    out.mkdir(parents=True)
    return folder


def _wait_rows(out: Path, done, cluster, timeout: float = 240) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        path = out / "rounds.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        if done(rows):
            return rows
        cluster.check()
        assert time.monotonic() < deadline, f"{len(rows)} rows after {timeout} s: {rows}"
        time.sleep(0.5)


def _check_global_models(out: Path, rows: list[dict], tf1, replies: bool) -> None:
    losses = [r["test_loss"] for r in rows if "round" in r]
    assert len(losses) == 3 and losses[2] < losses[0]  # rounds 0, 1, 2: the global model learned
    final = np.load(out / "global-2.npz")
    final = [final[f"arr_{i}"] for i in range(len(final.files))]
    if replies:  # the last round's global model is its replies' mean by examples (FedAvg's)
        got = np.load(out / "replies-2.npz")
        n = got["n"]
        assert len(n) == 2
        for i, w in enumerate(final):
            want = sum(n[j] * got[f"r{j}_{i}"].astype(np.float64) for j in range(len(n))) / n.sum()
            np.testing.assert_allclose(w, want, rtol=1e-5, atol=1e-7)
    # The round's checkpoint holds those weights, to the bit, in tfplus and in TensorFlow
    ckpt = tf.train.latest_checkpoint(str(out))
    assert ckpt.endswith("-4")  # round 2 of 2 local steps
    ours, theirs = tf.train.load_checkpoint(ckpt), tf1.train.NewCheckpointReader(ckpt)
    names = sorted(ours.get_variable_to_shape_map())
    model = [n for n in names if n != "global_step" and not n.endswith("/Momentum")]  # not the optimizer's
    assert len(model) == len(final)
    by_shape = {tuple(w.shape): [] for w in final}
    for w in final:
        by_shape[tuple(w.shape)].append(w)
    for name in model:
        value = ours.get_tensor(name)
        np.testing.assert_array_equal(theirs.get_tensor(name), value, err_msg=name)
        assert any(np.array_equal(value, w) for w in by_shape[value.shape]), name


def test_the_message_api_app_on_the_deployment_engine_with_both_supernodes(tmp_path, tf1):
    bench = _bench()
    scripts = bench.flower_scripts()
    out, home = tmp_path / "out", tmp_path / "flwr"
    home.mkdir()
    app = _app(tmp_path / "app", "serverapp", "clientapp", out)
    env = dict(os.environ, FLWR_HOME=str(home), PATH=os.pathsep.join([scripts, os.environ.get("PATH", "")]),
               FLWR_SUPEREXEC_TASK_POLL_INTERVAL="0.1")
    with open(tmp_path / "flower.log", "w") as log:
        cluster = bench.Cluster(home, ["cpu"], env, log, "tfplus")  # partition 0: tfplus's SuperNode
        try:
            cluster.start(["flower-supernode", "--insecure", "--superlink", f"127.0.0.1:{cluster.port}", "--port",
                           str(bench.free_port()), "--node-config", "partition-id=1 num-partitions=2"])
            cluster.wait_open()
            subprocess.run(["flwr", "run", str(app), "local"], env=env, stdout=log, stderr=subprocess.STDOUT,
                           check=True, timeout=120)
            rows = _wait_rows(out, lambda rows: any("federated_evaluation" in r for r in rows), cluster)
        finally:
            cluster.close()
    _check_global_models(out, rows, tf1, replies=True)
    evaluated = rows[-1]["federated_evaluation"]
    assert sorted(evaluated) == ["1", "2"] and all(np.isfinite(m["eval_loss"]) for m in evaluated.values())


def test_quickstart_tensorflows_numpyclient_app_through_flwr_run_in_the_simulation_engine(tmp_path, tf1):
    bench = _bench()
    scripts = bench.flower_scripts()
    out, home = tmp_path / "out", tmp_path / "flwr"
    home.mkdir()
    app = _app(tmp_path / "app", "legacy_serverapp", "legacy_clientapp", out)
    env = dict(os.environ, FLWR_HOME=str(home), PATH=os.pathsep.join([scripts, os.environ.get("PATH", "")]))
    port = bench.free_port()
    (home / "config.toml").write_text(f'[superlink]\ndefault = "local"\n\n[superlink.local]\n'
                                      f'address = "127.0.0.1:{port}"\ninsecure = true\n')
    with open(tmp_path / "flower.log", "w") as log:
        cluster = bench.Cluster.__new__(bench.Cluster)
        cluster.procs, cluster.port, cluster.env, cluster.log = [], port, env, log
        try:
            cluster.start(["flower-superlink", "--insecure", "--simulation",
                           "--disable-runtime-dependency-installation", "--host", "127.0.0.1", "--port", str(port)])
            cluster.wait_open()
            subprocess.run(["flwr", "run", str(app), "local", "--federation-config",
                            "num-supernodes=2 client-resources-num-cpus=1"], env=env, stdout=log,
                           stderr=subprocess.STDOUT, check=True, timeout=120)
            rows = _wait_rows(out, lambda rows: len(rows) >= 3, cluster)
        finally:
            cluster.close()
    _check_global_models(out, rows, tf1, replies=False)
