"""Federated Mentee on the real CIFAR-10 in Flower's Simulation Engine, tfplus against its PyTorch peer in the same
run: 10 clients, IID and Dirichlet(0.5) partitions, FedAvg; the global model's test accuracy after each round and
the seconds each round took, for both frameworks, for one or more seeds.
Run: `python benchmarks/bench_federated.py [--clients 10] [--rounds 20] [--local-steps 50] [--seeds 0,1,2]
[--data DIR] [--test-examples N] [--no-peer]`.
Phone-class clients (BENCHMARKS.md, "100 phone-class clients on one machine"): `--clients 100 --rounds 3
--local-steps 5 --partitions dirichlet:0.5 --client-budget 32MB --cpus 1 --measure-memory --no-peer` adds each
round's clients, the most any client planned, measured (tracemalloc) and held resident (its process's peak RSS).
Whether the two sides' recipes differ after round 1, without a simulation (minutes): `--check-rounds 3
--check-clients 0,5` (check_rounds; BENCHMARKS.md, "Federated: what differs after round 1").

The peer is benchmarks/torch_federated.py (needs torch): the same shards, batches, augmentation, optimizer, learning
rate schedule, FedAvg and central evaluation (its docstring lists them), and for each seed the very initial global
weights tfplus's server drew (its initial_weights.npz), so the two runs of a seed differ only by the frameworks'
arithmetic. Before each peer run the benchmark checks that: the exported weights in the mirror give tfplus's logits
on a test batch, and the peer draws client 0's first batches exactly as tfplus does. The issue's bar: tfplus within
1 point of the peer's accuracy at equal rounds, and its seconds per round within 1.5x of the peer's on the same CPU;
with --seeds, the gap's mean and spread over seeds say whether a gap is a difference or seed noise.
The data defaults to ../shared/data beside the repository (a folder holding cifar-10-batches-bin/). Each client
reads only its shard and is given --client-cpus CPUs (tfplus: one step worker per CPU at most; the peer: one torch
thread). Round 0 is the initial model; a round's seconds include Ray handing the clients to its workers (the
first also their start).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from tfplus.federated import flower
from tfplus.federated.partition import partition
from tfplus.units import parse_size

HERE = Path(__file__).resolve().parent


def federation(args, spec: str, seed: int, out: str) -> flower.Federation:
    return flower.Federation(model=args.model, clients=args.clients, rounds=args.rounds,
                             local_steps=args.local_steps, batch_size=args.batch_size, partition=spec, seed=seed,
                             client_cpus=args.client_cpus, cpus=args.cpus, client_budget=args.client_budget,
                             measure_memory=args.measure_memory, data=args.data, test_examples=args.test_examples,
                             out=out)


def progress(rows: list[dict], **about):
    """A log callback: keeps each round's row and prints its accuracy and seconds (a run cut short says how far
    it got)."""
    def log(row: dict) -> None:
        rows.append(row)
        print(json.dumps({**about, "round": row["round"], "test_accuracy": round(100 * row["test_accuracy"], 2),
                          "round_s": round(row["round_s"], 1)}), flush=True)
    return log


def run_tfplus(args, spec: str, seed: int, keep: str) -> list[dict]:
    """The tfplus run's rows; its server's initial weights are copied to `keep` (an .npz) for the peer."""
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as out:
        flower.simulate(federation(args, spec, seed, out),
                        log=progress(rows, partition=spec, seed=seed, framework="tfplus"))
        shutil.copyfile(os.path.join(out, "initial_weights.npz"), keep)
    return rows


def _peer_module():
    # NOTE: Ray's workers unpickle the peer's ClientApp by module name: they must find this folder.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    import torch_federated
    return torch_federated


def _recipe(args, spec: str, seed: int, init: str):
    return _peer_module().Recipe(args.data, args.clients, args.rounds, args.local_steps, args.batch_size, 0.05, spec,
                                 seed, init, args.test_examples)


def check_peer(args, spec: str, seed: int, init: str) -> dict:
    """What makes the two runs of a seed comparable, checked in this process: tfplus's initial weights in the mirror
    give tfplus's logits on 64 test images (largest difference, relative to the largest logit); the peer's batches
    for client 0's first round are tfplus's (largest difference over 3 batches: the normalization's float32
    rounding, a few 1e-7, when the same images, crops and flips); and client 0's first round trained on each side
    from the same start ends at the same weights (largest difference relative to the largest change the round
    made: float rounding, not a recipe's difference, which would show as a large fraction of the change)."""
    import torch

    from tfplus import data as tfdata
    from tfplus import trainer
    from tfplus.federated import FederatedModel
    from tfplus.federated.model import load_weights, pytorch_layout
    tf_peer = _peer_module()
    fed = federation(args, spec, seed, out="")
    model = FederatedModel(fed.train_config(), fed.round_steps(), fed.rounds, cpus=1)
    start = load_weights(init)
    model.set_weights(start)
    test = flower.test_set(dataclasses.replace(fed, test_examples=64))
    x = tfdata.normalize(test.test_images, "NCHW")
    ours = model.sess.run(model.tg.logits, trainer.image_feed(model.tg, x))
    mirror = tf_peer.Mentee()
    tf_peer.load_tfplus(mirror, init)
    with torch.no_grad():
        theirs = mirror(torch.from_numpy(x)).numpy()
    shard = flower.client_shard(fed, 0)
    batch, batch_seed = min(args.batch_size, len(shard.train_labels)), seed * 1_000_003 + 0 * 1009 + 1
    batch_diff, same_labels = 0.0, True
    with tfdata.train_batches(shard, batch, seed=batch_seed, augment=True, data_format="NCHW") as ours_b:
        theirs_b = tf_peer.batches(shard.train_images, shard.train_labels, batch, batch_seed)
        for _, (tx, ty), (px, py) in zip(range(3), ours_b, theirs_b):
            batch_diff = max(batch_diff, float(np.abs(tx - px.numpy()).max()))
            same_labels &= bool(np.array_equal(ty, py.numpy()))
    model.train(shard, fed.client_steps(len(shard.train_labels)), server_round=1, seed=batch_seed)
    ours_w = pytorch_layout(model.get_weights())
    model.close()
    torch.set_num_threads(1)
    tf_peer.train(_recipe(args, spec, seed, init), mirror, 0, 1)
    theirs_w = [p.detach().numpy() for p in mirror.state_dict().values()]
    start_w = pytorch_layout(start)
    change = max(float(np.abs(ours_w[k] - start_w[k]).max()) for k in ours_w)
    diff = max(float(np.abs(w - t).max()) for w, t in zip(ours_w.values(), theirs_w))
    return {"logits_max_rel_diff": float(np.abs(ours - theirs).max() / np.abs(ours).max()),
            "same_predictions": float(np.mean(ours.argmax(1) == theirs.argmax(1))), "batch_max_diff": batch_diff,
            "same_labels": same_labels, "round1_client0_weights_max_diff_over_change": diff / change}


def _mirror(tf_peer, weights: dict, folder: str):
    """The peer's Mentee holding tfplus's `weights` (through the .npz the peer's --init reads)."""
    from tfplus.federated.model import save_weights
    path = os.path.join(folder, "weights.npz")
    save_weights(path, weights)
    mirror = tf_peer.Mentee()
    tf_peer.load_tfplus(mirror, path)
    return mirror


def check_rounds(args, spec: str, seed: int) -> list[dict]:
    """The first args.check_rounds rounds of the --rounds run, clients args.check_clients (default all) of
    args.clients, in this process, on both sides, each round from the same global weights (tfplus's FedAvg of
    the previous round), so a difference in the recipe after round 1 shows apart from the chaos that carries one
    round's rounding into the next. Per round: the learning rate of every step of the round (tfplus's graph at
    that global step against the peer's learning_rate; the whole run's schedule in round 1's row), the global
    step tfplus ends at, each client's batches (images and labels, every step of the round), each client's
    trained weights (largest difference / largest change, as check_peer's) beside a control (tfplus against
    itself from the global weights moved by one float32 step: what rounding alone does in that round), the FedAvg
    of both sides (weights as the clients' example counts), and the central evaluation of the round's global
    model on --test-examples images (default 1,000) by each side's own evaluation path, image by image. With
    the recipe the same: learning rates and batches to float rounding (1e-9, 3e-7), the same predictions, and
    the clients' differences of the control's size (1e-6 over a few steps; up to tens of % of the change after
    10, where a max-pool near-tie sends a gradient elsewhere and training amplifies it)."""
    import torch

    from tfplus import data as tfdata
    from tfplus import trainer
    from tfplus.federated import FederatedModel
    from tfplus.federated.model import pytorch_layout
    tf_peer = _peer_module()
    torch.set_num_threads(1)
    fed = federation(args, spec, seed, out="")
    recipe = _recipe(args, spec, seed, None)
    steps = fed.round_steps()
    model = FederatedModel(fed.train_config(), steps, fed.rounds, cpus=1)
    test = flower.test_set(dataclasses.replace(fed, test_examples=args.test_examples or 1000))
    peer_x, peer_y, peer_tx, peer_ty = tf_peer.cifar(recipe)
    glob = model.get_weights()
    chosen = [int(c) for c in args.check_clients.split(",")] if args.check_clients else range(fed.clients)
    whole = max(abs(float(model.sess.run(model.tg.learning_rate)) - tf_peer.learning_rate(recipe, step))
                for step in range(steps * fed.rounds) if model.reset_optimizer(step) is None)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for rnd in range(1, args.check_rounds + 1):
            lr_diff = 0.0
            for step in range((rnd - 1) * steps, rnd * steps):
                model.reset_optimizer(step)
                lr_diff = max(lr_diff, abs(float(model.sess.run(model.tg.learning_rate)) -
                                           tf_peer.learning_rate(recipe, step)))
            row = {"round": rnd, "lr_max_diff": lr_diff, "batch_max_diff": 0.0, "same_labels": True,
                   "client_weights_max_diff_over_change": [], "control_max_diff_over_change": [],
                   "global_steps_ok": True,
                   **({"lr_whole_run_max_diff": whole} if rnd == 1 else {})}
            ours_all, theirs_all, counts = [], [], []
            for client in chosen:
                shard = flower.client_shard(fed, client)
                n = len(shard.train_labels)
                batch = min(fed.batch_size, n)
                batch_seed = seed * 1_000_003 + client * 1009 + rnd  # as flower.client_app's and the peer's train
                mine = partition(peer_y, fed.clients, spec, seed)[client]  # the peer's shard, as its train's
                with tfdata.train_batches(shard, batch, seed=batch_seed, augment=True, data_format="NCHW") as ours_b:
                    theirs_b = tf_peer.batches(peer_x[mine], peer_y[mine], batch, batch_seed)
                    for _, (tx, ty), (px, py) in zip(range(steps), ours_b, theirs_b):
                        row["batch_max_diff"] = max(row["batch_max_diff"], float(np.abs(tx - px.numpy()).max()))
                        row["same_labels"] &= bool(np.array_equal(ty, py.numpy()))
                model.set_weights(glob)
                model.train(shard, fed.client_steps(n), server_round=rnd, seed=batch_seed)
                row["global_steps_ok"] &= int(model.sess.run(model.tg.global_step)) == rnd * steps
                trained = model.get_weights()
                ours = pytorch_layout(trained)
                # The control: tfplus again from the global weights moved by one float32 step each (a rounding's
                # size): how far apart rounding alone puts two runs of the same recipe in this round.
                model.set_weights({k: np.nextafter(w, np.float32(np.inf)) for k, w in glob.items()})
                model.train(shard, fed.client_steps(n), server_round=rnd, seed=batch_seed)
                nudged = pytorch_layout(model.get_weights())
                mirror = _mirror(tf_peer, glob, folder)
                n_peer, _ = tf_peer.train(recipe, mirror, client, rnd)
                theirs = {k: p.detach().numpy().copy() for k, p in zip(ours, mirror.state_dict().values())}
                start = pytorch_layout(glob)
                change = max(float(np.abs(ours[k] - start[k]).max()) for k in ours)
                diff = max(float(np.abs(ours[k] - theirs[k]).max()) for k in ours)
                row["client_weights_max_diff_over_change"].append(diff / change)
                row["control_max_diff_over_change"].append(
                    max(float(np.abs(ours[k] - nudged[k]).max()) for k in ours) / change)
                if n_peer != n:
                    raise AssertionError(f"client {client}: tfplus's shard holds {n} examples, the peer's {n_peer}")
                ours_all.append(trained)
                theirs_all.append(theirs)
                counts.append(n)
            share = np.asarray(counts, np.float64) / sum(counts)
            new = {k: sum(s * w[k] for s, w in zip(share, ours_all)).astype(np.float32) for k in glob}
            peer_new = {k: sum(s * w[k] for s, w in zip(share, theirs_all)).astype(np.float32)
                        for k in theirs_all[0]}
            ours_new, start = pytorch_layout(new), pytorch_layout(glob)
            change = max(float(np.abs(ours_new[k] - start[k]).max()) for k in ours_new)
            row["fedavg_max_diff_over_change"] = max(float(np.abs(ours_new[k] - peer_new[k]).max())
                                                     for k in ours_new) / change
            # The central evaluation, both sides from tfplus's global model of the round.
            model.set_weights(new)
            row["test_accuracy_tfplus"], _ = model.evaluate(test)
            mirror = _mirror(tf_peer, new, folder)
            count = len(test.test_labels)
            row["same_test_labels"] = bool(np.array_equal(test.test_labels, peer_ty[:count]))
            row["test_accuracy_pytorch"] = tf_peer.evaluate(mirror, peer_tx[:count], peer_ty[:count],
                                                            torch.device("cpu"))
            # Image by image: tfplus's confusion counts (its evaluation's) against the mirror's predictions.
            _, confusion, _ = trainer.evaluate_predictions(model.sess, model.tg, test, 500, model.cfg.data_format)
            with torch.no_grad():
                predicted = np.concatenate([mirror(torch.from_numpy(tf_peer.normalize(peer_tx[i:i + 500]))).argmax(1)
                                            .numpy() for i in range(0, count, 500)])
            peer_confusion = np.zeros_like(confusion)
            np.add.at(peer_confusion, (peer_ty[:count], predicted), 1)
            row["test_images_predicted_differently_at_most"] = int(np.abs(confusion - peer_confusion).sum()) // 2
            for key in ("client_weights_max_diff_over_change", "control_max_diff_over_change"):
                row[key] = [float(f"{v:.2e}") for v in row[key]]
            print(json.dumps({"partition": spec, "seed": seed, "check_round": row}), flush=True)
            rows.append(row)
            glob = new
    model.close()
    return rows


def run_peer(args, spec: str, seed: int, init: str) -> list[dict]:
    rows: list[dict] = []
    _peer_module().simulate(_recipe(args, spec, seed, init), progress(rows, partition=spec, seed=seed,
                                                                      framework="pytorch"))
    return rows


def summarize(args, results: dict, checks: dict, seeds: list[int]) -> None:
    print(f"{args.model}, {args.clients} clients, {args.rounds} rounds of {args.local_steps} local steps of "
          f"{args.batch_size}, FedAvg, seeds {seeds}, {os.cpu_count()} cores:")
    for (spec, seed, who), r in results.items():
        print(f"  {spec:14s} seed {seed} {who:8s} test accuracy % by round {r['accuracy']}  seconds per round "
              f"{r['round_s']}  total {r['total_s']} s")
        if "trained_failed_timed_out" in r:
            print(f"  {'':30s} clients trained/failed/timed out by round {r['trained_failed_timed_out']}; the most "
                  f"a client planned {r['peak_bytes']}, measured {r['measured_peak_bytes']}, held resident "
                  f"{r['rss_bytes']} bytes")
        if (spec, seed) in checks and who == "pytorch":
            print(f"  {'':30s} same start and batches: {checks[spec, seed]}")
    for spec in args.partitions.split(","):
        pairs = [(results[spec, s, "tfplus"], results[spec, s, "pytorch"]) for s in seeds
                 if (spec, s, "pytorch") in results]
        if not pairs:
            continue
        # Per round, tfplus - pytorch in points, one row per seed (round 0, the same weights, is 0 up to rounding).
        gaps = np.array([np.subtract(ours["accuracy"], peer["accuracy"]) for ours, peer in pairs])
        last, over = gaps[:, -1], gaps[:, 1:].mean(axis=1)
        print(f"  {spec:14s} tfplus - pytorch by round, per seed: {np.round(gaps, 2).tolist()}")
        print(f"  {spec:14s} at round {args.rounds}: mean {last.mean():+.2f} points, spread (std over seeds) "
              f"{last.std(ddof=1) if len(last) > 1 else float('nan'):.2f}, range {last.min():+.2f}..{last.max():+.2f};"
              f" mean over rounds 1..{args.rounds}: {over.mean():+.2f} (per seed {np.round(over, 2).tolist()})")
        # The median round after the first (which also starts Ray's workers and reads the shards).
        ratios = [float(np.median(ours["round_s"][1:] or ours["round_s"])) /
                  float(np.median(peer["round_s"][1:] or peer["round_s"])) for ours, peer in pairs]
        print(f"  {spec:14s} seconds per round (median after round 1) tfplus / pytorch: "
              f"{[round(x, 2) for x in ratios]}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="mentee", help="tfplus's model (the peer is Mentee; default mentee)")
    p.add_argument("--clients", type=int, default=10)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--local-steps", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--client-cpus", type=int, default=1)
    p.add_argument("--cpus", type=int, help="CPUs Ray may use (default all): --cpus / --client-cpus clients at once")
    p.add_argument("--client-budget", type=lambda text: parse_size(text, "--client-budget"),
                   help="plan each tfplus client's step to fit this (e.g. 32MB); the peer has no budget")
    p.add_argument("--measure-memory", action="store_true", help="tfplus clients measure a step's peak (slower)")
    p.add_argument("--partitions", default="iid,dirichlet:0.5")
    p.add_argument("--seeds", default="0", help="comma-separated seeds: each runs both sides (partition, initial "
                   "weights, batches)")
    p.add_argument("--test-examples", type=int, help="central evaluation on the test set's first N images "
                   "(default all 10,000: about 12 s a round on 2 cores)")
    p.add_argument("--no-peer", action="store_true", help="tfplus alone (no torch)")
    p.add_argument("--check-rounds", type=int, default=0, help="no simulation: the first N rounds of the run in "
                   "this process on both sides, each from the same global weights, compared (check_rounds)")
    p.add_argument("--check-clients", help="with --check-rounds: the clients trained, e.g. 0,5 (default all)")
    p.add_argument("--data", default=str(HERE.parents[1] / "shared" / "data"))
    args = p.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    if not args.no_peer and args.model != "mentee":
        p.error(f"--model {args.model}: the peer is Mentee; give --model mentee or --no-peer")
    if args.check_rounds:
        for spec in args.partitions.split(","):
            for seed in seeds:
                check_rounds(args, spec, seed)
        return
    results, checks = {}, {}
    runners = {"tfplus": run_tfplus} if args.no_peer else {"tfplus": run_tfplus, "pytorch": run_peer}
    with tempfile.TemporaryDirectory() as keep:
        for spec in args.partitions.split(","):
            for seed in seeds:
                init = os.path.join(keep, f"initial_weights_{seed}.npz")
                for who, run in runners.items():
                    if who == "pytorch":
                        checks[spec, seed] = check_peer(args, spec, seed, init)
                        print(json.dumps({"partition": spec, "seed": seed, "check": checks[spec, seed]}), flush=True)
                    start = time.perf_counter()
                    rows = run(args, spec, seed, init)
                    results[spec, seed, who] = r = {
                        "accuracy": [round(100 * row["test_accuracy"], 2) for row in rows],
                        "round_s": [round(row["round_s"], 1) for row in rows[1:]],
                        "total_s": round(time.perf_counter() - start, 1)}
                    if who == "tfplus":  # per round: clients that trained, failed, timed out; the most any used
                        r["trained_failed_timed_out"] = [[len(row["clients"]), len(row["failed"]),
                                                          len(row["timed_out"])] for row in rows[1:]]
                        r.update({key: [row.get(key) for row in rows[1:]]
                                  for key in ("peak_bytes", "measured_peak_bytes", "rss_bytes")})
                    print(json.dumps({"partition": spec, "seed": seed, "framework": who, **r}), flush=True)
    summarize(args, results, checks, seeds)


if __name__ == "__main__":
    main()
