"""Federated rounds in Flower's Deployment Engine, SuperNodes per device: a SuperLink and K SuperNodes as separate
processes on 127.0.0.1 (runtime dependency installation off: nothing is installed, no package index is asked), each
SuperNode its own shard and `--device`, running tfplus's Flower apps (tfplus.federated.flower) for R rounds; prints
each round's wall time as the server saw it (the clients' processes started, their models made, their training,
FedAvg and the central evaluation), the clients' mean seconds to be ready (setup_s) and to train (train_s), the
server's evaluation and checkpoint (eval_s, save_s), and the fraction of a round that is training (train_s /
round_s), for each of --local-steps' counts in turn (the longer a round trains, the less Flower's fixed costs weigh).

    python benchmarks/bench_federated_deploy.py --devices opencl:0,opencl:1 --data DIR --rounds 3 \
        --local-steps 200,2000,8000 --modes two-devices,one-device --supernodes tfplus,flower
    python benchmarks/bench_federated_deploy.py --devices cpu,cpu --synthetic --rounds 2 --local-steps 5   # a try-out

Modes (--modes, default all three):
- two-devices: 2 SuperNodes, one on each of --devices' two devices (2 clients, an IID half of the data each);
- one-device: 2 SuperNodes both on the first device (the same work as two-devices, sharing one device);
- one-node: 1 SuperNode on the first device (1 client: one client's work, the round's floor).
The issue's bar (2 GPUs): two-devices' round time <= 0.6x one-device's.

Each mode runs with each of --supernodes' SuperNode commands in turn:
- flower: Flower's `flower-supernode`, which starts a fresh flwr-clientapp process for each round's message, so
  each client makes its model every round and reads its shard (from the run's shard cache after its first round):
  setup_s says what that costs; an idle one asks the SuperLink for a message every 3 s (fixed in Flower);
- tfplus: `tfplus federated supernode` (tfplus.federated.supernode), one warm ClientApp process per SuperNode that
  keeps the model, programs and shard between rounds, and the SuperNode's idle poll cut to 0.5 s.

Needs Flower without Ray (pip install flwr): the SuperLink, SuperNode, SuperExec and app processes are Flower's
console scripts (flower-superlink, flower-supernode, flower-superexec, flwr-serverapp, flwr-clientapp, flwr), found
beside this Python or on PATH. Flower keeps its state in FLWR_HOME, here a temporary folder. Flower's SuperExec
looks for a process to start every FLWR_SUPEREXEC_TASK_POLL_INTERVAL seconds (Flower's default 1 s; --task-poll
sets it, 0.1 s by default).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SCRIPTS = ("flower-superlink", "flower-supernode", "flower-superexec", "flwr-serverapp", "flwr-clientapp", "flwr")
MODES = ("two-devices", "one-device", "one-node")
# The SuperNode commands (--supernodes): Flower's, whose ClientApp is a fresh process per message, and tfplus's
# (tfplus.federated.supernode), whose ClientApp process stays warm and whose polls are shorter.
SUPERNODES = {"flower": ["flower-supernode"], "tfplus": [sys.executable, "-m", "tfplus", "federated", "supernode"]}


def flower_scripts() -> str:
    """The folder of Flower's console scripts (beside this Python first, else on PATH); exits naming what is
    missing."""
    try:
        import flwr  # noqa: F401
    except ImportError as e:
        sys.exit(f"bench_federated_deploy: Flower is not installed ({e}): pip install flwr (Ray is not needed)")
    here = str(Path(sys.executable).parent)
    found = shutil.which("flower-superlink", path=os.pathsep.join([here, os.environ.get("PATH", "")]))
    folder = Path(found).parent if found else None
    missing = [s for s in SCRIPTS if folder is None or not (folder / s).exists()]
    if missing:
        sys.exit(f"bench_federated_deploy: Flower's scripts {', '.join(missing)} are not beside {sys.executable} "
                 "or on PATH; reinstall flwr in this environment")
    return str(folder)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def toml_value(v) -> str:
    return json.dumps(v) if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v)


def write_app(folder: Path, config: dict) -> None:
    """A Flower app whose components are tfplus's apps and whose run config is `config` (Federation's keys)."""
    folder.mkdir(parents=True)
    lines = ['[project]', 'name = "tfplus-bench"', 'version = "1.0.0"', 'dependencies = []', '',
             '[tool.flwr.app]', 'publisher = "tfplus"', '', '[tool.flwr.app.components]',
             'serverapp = "tfplus.federated.flower:serverapp"', 'clientapp = "tfplus.federated.flower:clientapp"', '',
             '[tool.flwr.app.config]', *[f"{k} = {toml_value(v)}" for k, v in config.items()]]
    (folder / "pyproject.toml").write_text("\n".join(lines) + "\n")


class Cluster:
    """A SuperLink and one SuperNode per device on 127.0.0.1, each in its own process group (ended, with the
    processes Flower starts under it, when the cluster closes)."""

    def __init__(self, home: Path, devices: list[str], env: dict, log, supernode: str):
        self.procs: list[subprocess.Popen] = []
        self.port, self.env, self.log = free_port(), env, log
        (home / "config.toml").write_text(f'[superlink]\ndefault = "local"\n\n[superlink.local]\n'
                                          f'address = "127.0.0.1:{self.port}"\ninsecure = true\n')
        self.start(["flower-superlink", "--insecure", "--disable-runtime-dependency-installation",
                    "--host", "127.0.0.1", "--port", str(self.port)])
        for i, device in enumerate(devices):
            config = f"partition-id={i} num-partitions={len(devices)} device='{device}'"
            self.start([*SUPERNODES[supernode], "--insecure", "--superlink", f"127.0.0.1:{self.port}",
                        "--port", str(free_port()), "--node-config", config])

    def start(self, command: list[str]) -> None:
        self.procs.append(subprocess.Popen(command, env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
                                           start_new_session=True))

    def wait_open(self, timeout: float = 120) -> None:
        """Returns once the SuperLink accepts connections (the run can be submitted)."""
        deadline = time.monotonic() + timeout
        while True:
            self.check()
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the SuperLink did not open 127.0.0.1:{self.port} in {timeout} s") from None
                time.sleep(0.5)

    def check(self) -> None:
        for p in self.procs:
            if p.poll() is not None:
                raise RuntimeError(f"{p.args[0]} exited with {p.returncode}; see the log")

    def close(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)  # the group this Popen made: the node and what it started
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def run_mode(args, mode: str, devices: list[str], local_steps: int, work: Path, scripts: str,
             supernode: str) -> list[dict]:
    """R rounds of `local_steps` with one SuperNode (`supernode`'s command) per entry of `devices`; the server's
    rounds.jsonl rows."""
    work = work / f"{local_steps}-steps"
    mode = f"{mode}-{supernode}"
    out, home = work / mode / "out", work / mode / "flwr"
    home.mkdir(parents=True)
    config = {"model": args.model, "clients": len(devices), "rounds": args.rounds, "local-steps": local_steps,
              "batch-size": args.batch_size, "partition": "iid", "device": devices[0],
              "client-cpus": args.client_cpus, "out": str(out), "shard-cache": str(work.parent / "shards")}
    if args.synthetic:
        config["synthetic"] = True
    else:
        config["data"] = args.data
    if args.test_examples:
        config["test-examples"] = args.test_examples
    if args.lr is not None:
        config["lr"] = args.lr
    if args.client_budget:
        config["client-budget"] = args.client_budget
    write_app(work / mode / "app", config)
    env = dict(os.environ, FLWR_HOME=str(home), PATH=os.pathsep.join([scripts, os.environ.get("PATH", "")]),
               FLWR_SUPEREXEC_TASK_POLL_INTERVAL=str(args.task_poll))
    with open(work / mode / "flower.log", "w") as log:
        cluster = Cluster(home, devices, env, log, supernode)
        try:
            cluster.wait_open()
            subprocess.run(["flwr", "run", str(work / mode / "app"), "local"], env=env, stdout=log,
                           stderr=subprocess.STDOUT, check=True, timeout=120)
            deadline = time.monotonic() + args.timeout
            rows: list[dict] = []
            while len(rows) < args.rounds + 1:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{mode}: {len(rows)} of {args.rounds + 1} rounds' rows after {args.timeout} s")
                cluster.check()
                time.sleep(1)
                path = out / "rounds.jsonl"
                rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
                rows = [r for r in rows if r.get("kind") == "round"]
            return rows
        finally:
            cluster.close()


def summary(rows: list[dict], devices: list[str], started: float) -> dict:
    """A mode's figures from the server's rows (round 0, the initial evaluation, left out)."""
    r = {"devices": devices, **{k: [round(row.get(k, 0), 2) for row in rows[1:]]
                                for k in ("round_s", "setup_s", "train_s", "eval_s", "save_s")},
         "clients": [row["clients"] for row in rows[1:]],
         "failed": [row.get("failed") or [] for row in rows[1:]],
         "test_accuracy": [round(100 * row["test_accuracy"], 2) for row in rows],
         "total_s": round(time.perf_counter() - started, 1)}
    # The medians of the rounds after the first (which also builds programs), or the one round; of those whose
    # clients all replied (a failed client's round trained, or not, without saying how long).
    whole = [i for i, (c, f) in enumerate(zip(r["clients"], r["failed"])) if len(c) == len(devices) and not f]
    kept = [i for i in whole if i] or whole
    r["median"] = {k: float(np.median([r[k][i] for i in kept])) if kept else float("nan")
                   for k in ("round_s", "setup_s", "train_s", "eval_s", "save_s")}
    if len(whole) < len(r["clients"]):
        print(f"bench_federated_deploy: {len(r['clients']) - len(whole)} round(s) of {devices} had failed clients "
              f"({r['failed']}); left out of the medians", file=sys.stderr)
    return r


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--devices", default="cpu,cpu", help="the two SuperNodes' devices (default cpu,cpu; on two GPUs "
                   "opencl:0,opencl:1)")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    p.add_argument("--supernodes", default="flower,tfplus", help="comma-separated SuperNode commands run in turn at "
                   "each mode: flower (flower-supernode) and tfplus (tfplus federated supernode)")
    p.add_argument("--model", default="mentee")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--local-steps", default="50", help="each client's steps a round; comma-separated counts run in "
                   "turn, every mode at each (e.g. 200,2000,8000)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, help="the clients' peak learning rate (default the optimizer's; the synthetic "
                   "set, learnt whole in a round, diverged at it on an H200 in round 2)")
    p.add_argument("--client-cpus", type=int, default=1, help="each client's CPU threads and step workers")
    p.add_argument("--client-budget", help="plan each client's step to fit this (e.g. 32MB)")
    p.add_argument("--test-examples", type=int, default=1000, help="central evaluation on the test set's first N "
                   "images (default 1000; 0: all)")
    p.add_argument("--task-poll", type=float, default=0.1, help="seconds between the SuperExecs' looks for a "
                   "process to start (FLWR_SUPEREXEC_TASK_POLL_INTERVAL; Flower's default 1)")
    data = p.add_mutually_exclusive_group(required=True)
    data.add_argument("--data", help="the folder of cifar-10-batches-bin/ (or that folder)")
    data.add_argument("--synthetic", action="store_true", help="tfplus's small synthetic set")
    p.add_argument("--timeout", type=float, default=1800, help="seconds a mode's rounds may take in all")
    p.add_argument("--keep", help="keep the apps, Flower's logs and the rounds.jsonl files in this folder")
    args = p.parse_args()
    # SIGTERM (e.g. `timeout`) as an exit, so the clusters' `finally` ends the processes they started
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    scripts = flower_scripts()
    devices = args.devices.split(",")
    if len(devices) != 2:
        p.error(f"--devices {args.devices}: give two devices, comma-separated")
    try:
        counts = [int(n) for n in args.local_steps.split(",")]
    except ValueError:
        p.error(f"--local-steps {args.local_steps}: give step counts, comma-separated (e.g. 200,2000)")
    nodes = {"two-devices": devices, "one-device": [devices[0]] * 2, "one-node": [devices[0]]}
    modes = args.modes.split(",")
    supernodes = args.supernodes.split(",")
    for node in supernodes:
        if node not in SUPERNODES:
            p.error(f"--supernodes: {node!r} is not one of {', '.join(SUPERNODES)}")
    for mode in modes:
        if mode not in nodes:
            p.error(f"--modes: {mode!r} is not one of {', '.join(MODES)}")
    results: dict[int, dict[str, dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep or tmp)
        for steps in counts:
            results[steps] = {}
            for mode in modes:
                for node in supernodes:
                    start = time.perf_counter()
                    try:
                        rows = run_mode(args, mode, nodes[mode], steps, work, scripts, node)
                    except (RuntimeError, TimeoutError, subprocess.SubprocessError) as e:  # the others still run
                        print(json.dumps({"local_steps": steps, "mode": mode, "supernode": node,
                                          "error": f"{type(e).__name__}: {e}"}), flush=True)
                        continue
                    results[steps][mode, node] = r = summary(rows, nodes[mode], start)
                    print(json.dumps({"local_steps": steps, "mode": mode, "supernode": node, **r}), flush=True)
    print(f"{args.model}, {args.rounds} rounds, batch {args.batch_size}, FedAvg, Deployment Engine on 127.0.0.1, "
          f"task poll {args.task_poll} s; medians of the rounds after the first (which also builds programs); "
          "training: the clients' mean train_s, its share of the round:")
    for steps, by_mode in results.items():
        for (mode, node), r in by_mode.items():
            m = r["median"]
            print(f"  {steps:6d} steps  {mode:12s} {node:7s} {' + '.join(r['devices']):24s} s per round "
                  f"{m['round_s']:7.2f}  training {m['train_s']:6.2f} ({100 * m['train_s'] / m['round_s']:3.0f}%)  "
                  f"setup {m['setup_s']:5.2f}  server eval {m['eval_s']:5.2f} and save {m['save_s']:5.2f}")
        for node in supernodes:
            if ("two-devices", node) in by_mode and ("one-device", node) in by_mode:
                ratio = (by_mode["two-devices", node]["median"]["round_s"] /
                         by_mode["one-device", node]["median"]["round_s"])
                print(f"  {steps:6d} steps  {node} SuperNodes, two-devices / one-device: {ratio:.2f}x (bar: <= 0.6x)")

if __name__ == "__main__":
    main()
