"""`tfplus federated supernode` (tfplus.federated.supernode) in Flower's Deployment Engine on 127.0.0.1, offline:
a SuperLink, SuperNodes and the run as separate processes, as benchmarks/bench_federated_deploy.py starts them."""
import argparse
import importlib.util
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("flwr", reason="Flower is not installed: pip install \"tfplus[federated]\"")

from tfplus.federated import supernode  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_federated_deploy.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_federated_deploy", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_warm_clientapps_train_rounds_and_a_failing_client_is_reported_each_round(tmp_path):
    """Two SuperNodes of tfplus's: client 0 trains on the cpu, client 1 asks for an OpenCL device that is not
    there and fails. Each round's row has client 0's reply and client 1's failure, naming it (its warm process
    replied with the error and took the next round's task too, instead of the round timing out), and no
    `flwr-clientapp` process was started: the rounds' tasks ran in the SuperNodes' own ClientApp processes, whose
    model is kept (round 2's setup only sets the weights)."""
    bench = _bench()
    args = argparse.Namespace(model="lenet", rounds=2, batch_size=8, client_cpus=1, synthetic=True, data=None,
                              test_examples=20, lr=0.01, client_budget=None, task_poll=0.1, timeout=240)
    rows = bench.run_mode(args, "two-devices", ["cpu", "opencl:7"], 2, tmp_path, bench.flower_scripts(), "tfplus")
    assert [r["round"] for r in rows] == [0, 1, 2]
    for r in rows[1:]:
        assert r["clients"] == [0] and r["timed_out"] == []
        [failed] = r["failed"]
        assert "client 1: ValueError: OpenCL device 7 does not exist" in failed["reason"]
    assert rows[2]["setup_s"] < rows[1]["setup_s"]
    log = (tmp_path / "2-steps" / "two-devices-tfplus" / "flower.log").read_text()
    assert "Start `flwr-clientapp` process" not in log and "Receiving: train message" in log


def test_the_command_refuses_what_it_sets_itself(capsys):
    from tfplus import cli
    assert cli.main(["federated", "supernode", "--insecure", "--isolation", "subprocess"]) == 2
    assert "--isolation is not for this command" in capsys.readouterr().err
    assert cli.main(["federated", "supernode", "--idle-poll", "0"]) == 2
    assert "--idle-poll 0.0: give seconds in (0, 3]" in capsys.readouterr().err
    assert cli.main(["federated", "supernode", "--help"]) == 0
    assert "--idle-poll" in capsys.readouterr().out


def test_the_supernodes_waits_are_cut(monkeypatch):
    slept = []
    monkeypatch.setattr(supernode.time, "sleep", slept.append)
    clock = supernode._ShortSleeps(0.5)
    clock.sleep(3)  # Flower's wait after an empty poll of the SuperLink
    clock.sleep(0.5)  # its wait between looks for the ClientApp's reply
    assert slept == [0.5, supernode.LOCAL_POLL] and clock.time is supernode.time.time


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("signum, after, code, line", [
    # as Flower's web server for its Runtime API has just started, before Flower's own handlers are set
    (signal.SIGINT, "Uvicorn running on", 130, "tfplus federated: interrupted"),
    # once Flower's handlers are set (its retries of an unreachable SuperLink): they exited with 0 and 12 lines
    (signal.SIGINT, "Connection attempt failed", 130, "tfplus federated: interrupted"),
    (signal.SIGTERM, "Connection attempt failed", 143, "tfplus federated: SIGTERM: stopped"),
])
def test_the_first_stop_signal_ends_the_supernode_with_one_line(signum, after, code, line):
    """The first Ctrl-C (or SIGTERM) ends `tfplus federated supernode` in bounded time, with its one line last
    and 128 + the signal. Before: a Ctrl-C while Flower's web server started left its thread running (the process
    said it was interrupted and stayed until a second Ctrl-C), and once Flower's handlers were set it ended with
    status 0 after a dozen log lines."""
    proc = subprocess.Popen([sys.executable, "-m", "tfplus", "federated", "supernode", "--insecure", "--superlink",
                             f"127.0.0.1:{_free_port()}", "--node-config", "partition-id=0 num-partitions=2",
                             "--port", str(_free_port())], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    seen = []
    try:
        for text in proc.stdout:
            seen.append(text)
            if after in text:
                break
        proc.send_signal(signum)
        rest, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    lines = [t.strip() for t in (seen + rest.splitlines()) if t.strip()]
    assert proc.returncode == code, lines[-5:]
    assert lines[-1] == line and not any("terminated gracefully" in t for t in lines)
