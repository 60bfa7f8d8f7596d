"""The cold cost of a tfplus process: fresh interpreters importing tfplus, running `tfplus --help`, importing
tfplus.federated, one step of `tfplus train` on the cpu (LeNet, batch 8, synthetic), and a federated client's
setup (what a Flower Deployment Engine client process does for each round's message: import tfplus's Flower app,
make the model and session, read its shard, set the global weights, take its first local step). Each command runs
`--repeats` times in turns with the others (and with the other `--tree`s', for a before/after in one run); the
figures are medians of the process's wall-clock and CPU seconds (user + system: steadier than wall on a shared machine).

    python benchmarks/bench_cold_start.py --repeats 7                       # this tree
    python benchmarks/bench_cold_start.py --tree . --tree ../old --repeats 7   # two trees in turns
    python benchmarks/bench_cold_start.py --bytecode none                   # every tfplus module compiled

Each command runs in the tree's root, so that `python -c` and `python -m tfplus` import that tree's tfplus (the
working folder comes first on Python's path). `--bytecode cached` (the default) gives each tree its own
PYTHONPYCACHEPREFIX, filled by one untimed run first: what an install (pip compiles the modules) or any second
run sees. `--bytecode none` sets PYTHONDONTWRITEBYTECODE=1 and compiles tfplus's sources in every process (the
packages it imports keep their own caches): what a source checkout costs where bytecode is never written. The
client step is that of --model at --batch-size on the synthetic set (or --data's CIFAR-10), on --device.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# A federated client's first message, as tfplus.federated.flower.client_app's train handler serves it, in phases;
# prints {phase: [wall seconds since the process was started, the process's CPU seconds by then]}.
CLIENT = """
import json, os, sys, time
t = {"python": (time.monotonic(), time.process_time())}
from tfplus.federated import flower
t["import"] = (time.monotonic(), time.process_time())
fed = flower.Federation(model=sys.argv[1], batch_size=int(sys.argv[2]), device=sys.argv[3], clients=2,
                        synthetic=sys.argv[4] == "", data=sys.argv[4] or None, local_steps=1)
flower.check_opencl_gpu(fed.device)
model = flower.FederatedModel(fed.train_config(), fed.round_steps(), fed.rounds, cpus=fed.client_cpus)
t["model"] = (time.monotonic(), time.process_time())
shard = flower.client_shard(fed, 0)
t["shard"] = (time.monotonic(), time.process_time())
model.set_weights(model.get_weights())
t["weights"] = (time.monotonic(), time.process_time())
model.train(shard, 1, 1)
t["step"] = (time.monotonic(), time.process_time())
start = float(os.environ["BENCH_START"])
print(json.dumps({k: [wall - start, cpu] for k, (wall, cpu) in t.items()}))
"""

COMMANDS = {
    "python": ["-c", "pass"],
    "numpy": ["-c", "import numpy"],
    "import tfplus": ["-c", "import tfplus"],
    "tfplus --help": ["-m", "tfplus", "--help"],
    "import tfplus.federated": ["-c", "import tfplus.federated"],
    "federated client": ["-c", CLIENT],
    "tfplus train 1 step": ["-m", "tfplus", "train", "--synthetic", "--model", "lenet", "--batch-size", "8", "--steps",
                            "1", "--no-eval", "--threads", "1"],
}


def run(tree: Path, args: list[str], env: dict) -> tuple[float, float, dict]:
    """One process: (wall s, CPU s, its JSON line if it printed one)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    out = subprocess.run([sys.executable, *args], cwd=tree, env=dict(env, BENCH_START=repr(start)),
                         capture_output=True, text=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode:
        sys.exit(f"{' '.join(args)[:60]} in {tree} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    last = out.stdout.strip().splitlines()[-1:] or [""]
    return wall, cpu, json.loads(last[0]) if last[0].startswith("{") else {}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tree", action="append", type=Path, help="a tfplus source tree (repeatable; default this one)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--bytecode", choices=("cached", "none"), default="cached")
    p.add_argument("--commands", default=",".join(COMMANDS), help="comma list of: " + ", ".join(COMMANDS))
    p.add_argument("--model", default="mentee")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--device", default="cpu")
    p.add_argument("--data", default="", help="CIFAR-10's folder for the client's shard (default: synthetic)")
    args = p.parse_args()
    trees = [t.resolve() for t in args.tree or [Path(__file__).resolve().parent.parent]]
    names = args.commands.split(",")
    for name in names:
        if name not in COMMANDS:
            p.error(f"--commands: {name!r} is not one of {', '.join(COMMANDS)}")
    client_args = [args.model, str(args.batch_size), args.device, args.data]
    with tempfile.TemporaryDirectory() as tmp:
        envs = []
        for i, tree in enumerate(trees):
            env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
            env.update(XDG_CACHE_HOME=os.path.join(tmp, f"cache{i}"), TFPLUS_OPENCL_PREBUILD="0")
            if args.bytecode == "cached":
                env.pop("PYTHONDONTWRITEBYTECODE", None)
                env["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, f"pyc{i}")
            else:
                env["PYTHONDONTWRITEBYTECODE"] = "1"
                env.pop("PYTHONPYCACHEPREFIX", None)
                if any((tree / "tfplus").rglob("*.pyc")):
                    print(f"note: {tree} holds .pyc files, which Python still reads under --bytecode none")
            envs.append(env)
            for name in names:  # untimed: fills the bytecode cache, the shard and program caches
                run(tree, COMMANDS[name] + (client_args if name == "federated client" else []), env)
        times: dict = {}
        for _ in range(args.repeats):
            for name in names:
                for i, tree in enumerate(trees):
                    extra = client_args if name == "federated client" else []
                    times.setdefault((name, i), []).append(run(tree, COMMANDS[name] + extra, envs[i]))
    print(f"{args.repeats} runs each in turns, bytecode {args.bytecode}; medians: wall s, CPU s"
          + (f"; client: {args.model} batch {args.batch_size} on {args.device}" if "federated client" in names
             else ""))
    for i, tree in enumerate(trees):
        print(f"  tree {i}: {tree}")
    for name in names:
        for i in range(len(trees)):
            rows = times[(name, i)]
            line = (f"{name:24} tree {i}: {statistics.median(r[0] for r in rows):6.3f} wall "
                    f"{statistics.median(r[1] for r in rows):6.3f} CPU")
            if rows[0][2]:
                line += "\n" + " " * 26 + "reached (wall/CPU s): " + ", ".join(
                    f"{k} {statistics.median(r[2][k][0] for r in rows):.2f}/"
                    f"{statistics.median(r[2][k][1] for r in rows):.2f}" for k in rows[0][2])
            print(line)


if __name__ == "__main__":
    main()
