"""Federated Mentee, tfplus against its PyTorch peer over many seeds at once: every (seed, side, partition) a
single-threaded process, `--jobs` of them side by side, each running the by-hand FedAvg loop that
tests/federated/test_flower.py::test_flowers_rounds_are_the_recipe_the_pytorch_peer_follows proves equal to Flower's
rounds (so neither side needs Flower, nor Ray).

    python benchmarks/bench_federated_seeds.py --data DIR --seeds 0-15 --partitions iid,dirichlet:0.5 \\
        --rounds 20 --local-steps 10 --eval-every 5 --jobs 32 --out OUT

Both sides of a seed: the same shards (tfplus.federated.partition), tfplus's initial weights (the peer loads them
through pytorch_layout), the same batches (seed*1000003 + client*1009 + round), the same recipe (SGD with Nesterov
momentum, weight decay on the weights, the optimizer reset each round, the warm-up and cosine schedule across rounds;
benchmarks/torch_federated.py's docstring lists it), FedAvg weighted by the shards' sizes, and the central evaluation
of the global model on the test set (its first --test-examples images, default all 10,000) after round 0, every
--eval-every rounds and the last. Each process sets OMP/MKL/OpenBLAS threads to 1 before importing NumPy or torch;
tfplus runs on its cpu device with 1 thread and 1 step worker, torch with torch.set_num_threads(1).

Writes --jobs-dir/*.jsonl (default OUT/jobs; a row per (seed, side, partition, round): test_accuracy in %, train_s:
the seconds the round's clients trained, one after another, eval_s: the central evaluation's), then OUT/rounds.jsonl
(all rows) and OUT/summary.json, printed too: per partition and evaluated round, the gap tfplus - PyTorch in points,
its mean over seeds and standard error (std / sqrt(seeds)); per partition, tfplus's training seconds per round over
the peer's (median round, per seed, and their mean). `--time-limit S` stops the jobs after S seconds and summarizes
the rounds both sides of a seed reached; `--summarize` summarizes the jobs' rows again.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# One thread per process on both sides: set before NumPy or torch starts its pools.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
               "NUMEXPR_NUM_THREADS")
SIDES = ("tfplus", "pytorch")
LR = 0.05  # Mentee's default learning rate in tfplus (lr=None), given to the peer explicitly


@dataclasses.dataclass(frozen=True)
class Job:
    """One process's work: `side` runs `rounds` rounds of FedAvg on `partition` for `seed`."""
    data: str
    seed: int
    side: str
    partition: str
    clients: int
    rounds: int
    local_steps: int
    batch_size: int
    eval_every: int
    test_examples: int | None

    def evaluated(self, rnd: int) -> bool:
        return rnd == 0 or rnd == self.rounds or rnd % self.eval_every == 0

    def file(self, folder: Path) -> Path:
        return folder / f"{self.partition.replace(':', '-')}_seed{self.seed}_{self.side}.jsonl"


def _tfplus_model(job: Job):
    """tfplus's Mentee for the job's seed on its cpu device, 1 thread and 1 step worker, as a Federation's
    train_config makes it (tfplus.federated.flower; that module needs Flower)."""
    from tfplus import trainer
    from tfplus.federated import FederatedModel
    cfg = trainer.TrainConfig(model="mentee", batch_size=job.batch_size, seed=job.seed, device="cpu", data=job.data)
    return FederatedModel(cfg, job.local_steps, job.rounds, cpus=1)


def _shards(job: Job):
    """(the batches folder, each client's training indices): tfplus.federated.flower.client_shard's partition."""
    from tfplus.data import cifar10
    from tfplus.federated.partition import partition
    folder = cifar10.find_data_dir(job.data)
    if folder is None:
        raise SystemExit(f"--data {job.data}: no CIFAR-10 binary batches there (data_batch_1.bin .. test_batch.bin "
                         "or a cifar-10-batches-bin/ folder); give the folder that holds them")
    return folder, partition(cifar10.read_labels(folder)[0], job.clients, job.partition, job.seed)


def _fedavg(trained: list[dict], counts: list[int]) -> dict:
    """The clients' weights averaged by their shards' sizes (Flower's FedAvg), in float64, stored as float32."""
    import numpy as np
    share = np.asarray(counts, np.float64) / sum(counts)
    return {k: sum(s * w[k] for s, w in zip(share, trained)).astype(np.float32) for k in trained[0]}


def run_tfplus(job: Job, log) -> dict:
    """The tfplus side; returns the last round's global weights."""
    import numpy as np

    from tfplus.data import cifar10
    folder, parts = _shards(job)
    model = _tfplus_model(job)
    test = cifar10.read_shard(folder, np.zeros(0, np.int64),
                              np.arange(len(cifar10.read_labels(folder)[1]))[:job.test_examples])
    glob = model.get_weights()
    shards = [cifar10.read_shard(folder, mine) for mine in parts]  # a few MB each: kept for all rounds
    for rnd in range(job.rounds + 1):
        train_s = 0.0
        if rnd:
            trained = []
            for client, shard in enumerate(shards):
                model.set_weights(glob)
                start = time.perf_counter()
                model.train(shard, job.local_steps, server_round=rnd, seed=job.seed * 1_000_003 + client * 1009 + rnd)
                train_s += time.perf_counter() - start
                trained.append(model.get_weights())
            glob = _fedavg(trained, [len(s.train_labels) for s in shards])
        if job.evaluated(rnd):
            model.set_weights(glob)
            start = time.perf_counter()
            accuracy, _ = model.evaluate(test)
            log(rnd, accuracy, train_s, time.perf_counter() - start)
        else:
            log(rnd, None, train_s, 0.0)
    model.close()
    return glob


def run_pytorch(job: Job, log) -> None:
    """The peer's side: benchmarks/torch_federated.py's client training, FedAvg and evaluation by hand."""
    import numpy as np
    import torch
    sys.path.insert(0, str(HERE))  # the peer's modules (python -P does not put this folder on the path)
    import torch_federated as peer
    torch.set_num_threads(1)
    model = _tfplus_model(job)  # the peer starts from tfplus's initial weights for the seed
    start_weights = model.get_weights()
    model.close()
    recipe = peer.Recipe(job.data, job.clients, job.rounds, job.local_steps, job.batch_size, LR, job.partition,
                         job.seed, None, job.test_examples)
    mirror = peer.Mentee()
    peer.set_tfplus_weights(mirror, start_weights)
    _, _, test_x, test_y = peer.cifar(recipe)
    test_x, test_y = test_x[:job.test_examples], test_y[:job.test_examples]
    glob = {k: v.detach().numpy().copy() for k, v in mirror.state_dict().items()}
    for rnd in range(job.rounds + 1):
        train_s = 0.0
        if rnd:
            trained, counts = [], []
            for client in range(job.clients):
                mirror.load_state_dict({k: torch.from_numpy(v) for k, v in glob.items()})
                start = time.perf_counter()
                n, _ = peer.train(recipe, mirror, client, rnd)
                train_s += time.perf_counter() - start
                trained.append({k: v.detach().numpy().copy() for k, v in mirror.state_dict().items()})
                counts.append(n)
            glob = _fedavg(trained, counts)
        if job.evaluated(rnd):
            mirror.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in glob.items()})
            start = time.perf_counter()
            accuracy = peer.evaluate(mirror, test_x, test_y, torch.device("cpu"))
            log(rnd, accuracy, train_s, time.perf_counter() - start)
        else:
            log(rnd, None, train_s, 0.0)


def run_job(job: Job, folder: Path) -> None:
    """One (seed, side, partition): a row per round appended to its file in `folder` as the round ends (a job
    cut short leaves the rounds it finished)."""
    path = job.file(folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        def log(rnd: int, accuracy: float | None, train_s: float, eval_s: float) -> None:
            row = {"seed": job.seed, "side": job.side, "partition": job.partition, "round": rnd,
                   "test_accuracy": None if accuracy is None else round(100 * accuracy, 2),
                   "train_s": round(train_s, 3), "eval_s": round(eval_s, 3)}
            f.write(json.dumps(row) + "\n")
            f.flush()
        (run_tfplus if job.side == "tfplus" else run_pytorch)(job, log)


def _rows(folder: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(folder.glob("*.jsonl"))
            for line in path.read_text().splitlines() if line.strip()]


def summarize(rows: list[dict]) -> dict:
    """Per partition: per evaluated round that both sides of at least one seed reached, the gap tfplus - PyTorch
    (points) per seed, its mean and standard error over the seeds (None with one seed); the median training
    seconds of a round after the first, tfplus over PyTorch, per seed and their mean."""
    import numpy as np
    table: dict = {}
    for r in rows:
        table.setdefault(r["partition"], {}).setdefault(r["seed"], {}).setdefault(r["side"], {})[r["round"]] = r
    summary = {}
    for spec, seeds in table.items():
        gaps: dict[int, dict[int, float]] = {}
        ratios = {}
        for seed, sides in seeds.items():
            if set(SIDES) - set(sides):
                continue
            ours, theirs = sides["tfplus"], sides["pytorch"]
            for rnd in sorted(set(ours) & set(theirs)):
                a, b = ours[rnd]["test_accuracy"], theirs[rnd]["test_accuracy"]
                if a is not None and b is not None:
                    gaps.setdefault(rnd, {})[seed] = round(a - b, 2)
            # The median round after the first (the first also warms caches and compiles tfplus's step).
            both = sorted(set(ours) & set(theirs) - {0})
            later = both[1:] or both
            if later:
                ratios[seed] = round(float(np.median([ours[n]["train_s"] for n in later]) /
                                           np.median([theirs[n]["train_s"] for n in later])), 3)
        by_round = {}
        for rnd, per_seed in sorted(gaps.items()):
            g = np.array(list(per_seed.values()))
            by_round[rnd] = {"seeds": len(g), "mean_gap": round(float(g.mean()), 3),
                             "stderr": round(float(g.std(ddof=1) / np.sqrt(len(g))), 3) if len(g) > 1 else None,
                             "per_seed": per_seed}
        summary[spec] = {"gap_by_round": by_round, "train_s_ratio_per_seed": ratios,
                         "train_s_ratio_mean": round(float(np.mean(list(ratios.values()))), 3) if ratios else None}
    return summary


def report(summary: dict) -> None:
    for spec, s in summary.items():
        print(f"{spec}: tfplus - PyTorch, test accuracy points (mean +- standard error over seeds):")
        for rnd, g in s["gap_by_round"].items():
            err = "" if g["stderr"] is None else f" +- {g['stderr']:.2f}"
            print(f"  round {rnd:3d}: {g['mean_gap']:+.2f}{err}  ({g['seeds']} seeds: "
                  f"{', '.join(f'{v:+.2f}' for v in g['per_seed'].values())})")
        print(f"  training seconds per round, tfplus / PyTorch (median round, 1 thread each): mean "
              f"{s['train_s_ratio_mean']}, per seed {s['train_s_ratio_per_seed']}")


def _seeds(text: str) -> list[int]:
    """'0-9' or '0,3,5' (or both: '0-3,7')."""
    seeds = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        seeds += range(int(first), int(last or first) + 1)
    return seeds


def launch(args, jobs: list[Job], out: Path, folder: Path) -> None:
    """Runs `jobs` as child processes of this script, args.jobs at a time, each with one thread, their rows in
    `folder`; after args.time_limit seconds the unfinished ones are stopped. Every minute the rows so far go to
    out/rounds.jsonl (a run killed from outside still leaves them)."""
    env = {**os.environ, **{var: "1" for var in THREAD_VARS}}
    me = [sys.executable, *(["-P"] if sys.flags.safe_path else []), str(Path(__file__).resolve())]
    waiting, running, failed = list(jobs), [], []
    start = time.monotonic()
    deadline, saved = start + (args.time_limit or float("inf")), start
    while (waiting or running) and time.monotonic() < deadline:
        while waiting and len(running) < args.jobs:
            job = waiting.pop(0)
            running.append((job, subprocess.Popen([*me, "--job", json.dumps(dataclasses.asdict(job)),
                                                   "--jobs-dir", str(folder), "--out", str(out)], env=env)))
        time.sleep(0.5)
        if time.monotonic() - saved > 60:
            saved = time.monotonic()
            _write_rows(out, _rows(folder))
            print(f"{saved - start:.0f} s: {len(running)} jobs running, {len(waiting)} waiting", flush=True)
        for job, proc in list(running):
            if proc.poll() is not None:
                running.remove((job, proc))
                if proc.returncode:
                    failed.append(f"{job.partition} seed {job.seed} {job.side} (exit {proc.returncode})")
    for job, proc in running:
        proc.terminate()
        proc.wait()
        failed.append(f"{job.partition} seed {job.seed} {job.side} (stopped at --time-limit)")
    if waiting:
        failed.append(f"{len(waiting)} jobs never started (--time-limit)")
    if failed:
        print("unfinished: " + "; ".join(failed), file=sys.stderr, flush=True)


def _write_rows(out: Path, rows: list[dict]) -> None:
    with open(out / "rounds.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def finish(out: Path, folder: Path) -> None:
    rows = _rows(folder)
    _write_rows(out, rows)
    summary = summarize(rows)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    report(summary)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", help="a folder holding cifar-10-batches-bin/ (or that folder)")
    p.add_argument("--out", required=True, help="a folder for rounds.jsonl and summary.json")
    p.add_argument("--jobs-dir", help="a folder for each job's rows (default OUT/jobs)")
    p.add_argument("--seeds", default="0-9", help="e.g. 0-15 or 0,1,2 (default 0-9)")
    p.add_argument("--partitions", default="iid,dirichlet:0.5")
    p.add_argument("--sides", default="tfplus,pytorch", help="tfplus alone needs no torch")
    p.add_argument("--clients", type=int, default=10)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--local-steps", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--eval-every", type=int, default=1, help="central evaluation every K rounds (and the last)")
    p.add_argument("--test-examples", type=int, help="evaluate on the test set's first N images (default all)")
    p.add_argument("--jobs", type=int, default=os.cpu_count(), help="processes at once (default: one per core)")
    p.add_argument("--time-limit", type=float, help="seconds; then stop the jobs and summarize what finished")
    p.add_argument("--job", help=argparse.SUPPRESS)  # a child: one Job as JSON
    p.add_argument("--summarize", action="store_true", help="only summarize --out's jobs/*.jsonl again")
    args = p.parse_args()
    out = Path(args.out)
    folder = Path(args.jobs_dir) if args.jobs_dir else out / "jobs"
    if args.job:
        run_job(Job(**json.loads(args.job)), folder)
        return
    if not args.summarize:
        if not args.data:
            p.error("--data DIR is required (a folder holding cifar-10-batches-bin/)")
        sides = args.sides.split(",")
        if set(sides) - set(SIDES):
            p.error(f"--sides {args.sides}: use tfplus, pytorch or both")
        if min(args.clients, args.rounds, args.local_steps, args.batch_size, args.eval_every, args.jobs) < 1:
            p.error("--clients, --rounds, --local-steps, --batch-size, --eval-every and --jobs must be >= 1")
        jobs = [Job(args.data, seed, side, spec, args.clients, args.rounds, args.local_steps, args.batch_size,
                    args.eval_every, args.test_examples)
                for seed in _seeds(args.seeds) for spec in args.partitions.split(",") for side in sides]
        start = time.perf_counter()
        out.mkdir(parents=True, exist_ok=True)
        launch(args, jobs, out, folder)
        print(f"{len(jobs)} jobs, {args.jobs} at a time, {os.cpu_count()} cores: "
              f"{time.perf_counter() - start:.0f} s", flush=True)
    finish(out, folder)


if __name__ == "__main__":
    main()
