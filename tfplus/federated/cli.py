"""`tfplus federated simulate`: federated training of a model on CIFAR-10 shards, in Flower's Simulation Engine.

    tfplus federated simulate --model lenet --clients 8 --rounds 5 --local-steps 50 --partition dirichlet:0.5 \\
        --out fl/
    tfplus eval fl/          # the global model of the last round

Each round's row (test accuracy and loss of the global model, the clients that replied, failed or timed out, the
seconds it took) is printed and appended to OUT/rounds.jsonl; OUT also gets the global model's checkpoints and
TensorBoard scalars (federated/*).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from tfplus import cli_args


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Adds `federated simulate` to an argparse subparsers object; its handler is `main` (set as `func`)."""
    from tfplus.federated import STRATEGIES
    from tfplus.federated.partition import SPECS
    f = subparsers.add_parser("federated", help="federated training on Flower (pip install \"tfplus[federated]\")",
                              description=__doc__.split("\n\n")[0])
    sub = f.add_subparsers(dest="federated_command", metavar="COMMAND", parser_class=cli_args.Parser, required=True)
    s = sub.add_parser("simulate", help="N clients and a server in Flower's Simulation Engine on this machine",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("--model", type=cli_args.model, default="lenet", help="registered model; default lenet")
    s.add_argument("--clients", type=cli_args.positive_int, default=8, help="simulated clients (default 8)")
    s.add_argument("--rounds", type=cli_args.positive_int, default=5, help="federated rounds (default 5)")
    local = s.add_mutually_exclusive_group()
    local.add_argument("--local-steps", type=cli_args.positive_int,
                       help="optimizer steps each client takes per round (default 50)")
    local.add_argument("--local-epochs", type=cli_args.positive_int, metavar="N",
                       help="instead of --local-steps: each client passes N times over its shard per round (a larger "
                       "shard takes more steps; the learning-rate schedule counts an equal shard's)")
    s.add_argument("--batch-size", type=cli_args.batch_size, default=32, help="client batch size (default 32)")
    s.add_argument("--lr", type=float, help="peak learning rate (default: the optimizer's, 0.05 for momentum); the "
                   "schedule warms up over round 1 and decays over all rounds' steps")
    s.add_argument("--partition", type=cli_args.partition, default="iid", help=f"{SPECS}; default iid")
    s.add_argument("--strategy", choices=STRATEGIES, default="fedavg",
                   help="Flower strategy (default fedavg); each averages batch norm's moving statistics by examples, "
                   "the server's optimizer (fedadam, fedavgm, fedadagrad, fedyogi) steps the trained weights only")
    s.add_argument("--proximal-mu", type=float, default=0.01, help="fedprox's mu (default 0.01)")
    s.add_argument("--min-clients", type=cli_args.positive_int, default=1, dest="min_train",
                   help="replies a round needs to go on (Flower's min_train_nodes; default 1): a failed or timed-out "
                   "client is reported by id and the round goes on with the rest")
    s.add_argument("--round-timeout", type=float, metavar="SECONDS", help="how long a round waits for replies "
                   "(default 600 for each turn of clients: a simulation's workers take its clients in turns)")
    s.add_argument("--client-budget", type=cli_args.size, metavar="SIZE",
                   help="plan each client's training step to fit SIZE bytes (e.g. 32MB)")
    s.add_argument("--measure-memory", action="store_true", help="each client traces its NumPy memory (tracemalloc, "
                   "slower) and measures its last step's peak, reported beside the plan's (measured_peak_bytes)")
    s.add_argument("--device", type=cli_args.device, default="cpu", help="each client's device: cpu or opencl[:N] "
                   "(an OpenCL GPU: a client that finds only a CPU OpenCL device fails, naming why)")
    s.add_argument("--client-cpus", type=cli_args.positive_int, default=1,
                   help="CPUs per client (Ray's num_cpus): its threads and at most as many step workers (default 1)")
    s.add_argument("--cpus", type=cli_args.positive_int, help="CPUs the simulation's clients share (Ray's num_cpus; "
                   "default all of this machine's): --cpus / --client-cpus clients train at once, each in its own "
                   "worker process")
    s.add_argument("--client-gpus", type=float, default=0.0, help="GPUs per client (Ray's num_gpus; a fraction "
                   "shares one); needed for --device opencl on NVIDIA GPUs")
    s.add_argument("--seed", type=cli_args.seed, default=0, help="the partition, the initial weights, the batches")
    data = s.add_mutually_exclusive_group()
    data.add_argument("--data", type=cli_args.path, metavar="DIR", help="the folder of cifar-10-batches-bin/ "
                      "(default $TFPLUS_DATA, else the cache); each client reads only its shard")
    data.add_argument("--synthetic", action="store_true", help="tfplus's small synthetic set (a demo)")
    s.add_argument("--download", action="store_true", help="download CIFAR-10 (about 170 MB, md5-checked) into --data "
                   "or the cache first, if it is not there")
    s.add_argument("--shard-cache", type=cli_args.path, metavar="DIR", help="keep each client's shard here as an "
                   ".npz (verified on load) for its next round, instead of reading it from the data files again")
    s.add_argument("--out", metavar="DIR", help="rounds.jsonl, the global model's checkpoints, TensorBoard events")
    s.add_argument("--resume", action="store_true", help="continue the run in --out from its newest checkpoint that "
                   "verifies (after Ctrl-C, SIGTERM or a kill), with the same options")
    s.set_defaults(func=main)
    # flower-supernode's flags pass through as they are: this parser takes none ("+" is its prefix) but -h
    n = sub.add_parser("supernode", help="a Flower SuperNode (Deployment Engine) whose ClientApp process stays "
                       "warm between rounds; flower-supernode's flags", prefix_chars="+", add_help=False)
    n.add_argument("flower_args", nargs="*")
    n.set_defaults(func=_supernode)
    return f


def _supernode(args: argparse.Namespace) -> int:
    from tfplus.federated import supernode
    return supernode.main(args.flower_args)


def main(args: argparse.Namespace) -> int:
    from tfplus import data as tfdata
    from tfplus.trainer import EXIT_ON_SIGNAL, UsageError
    try:
        from tfplus.federated import flower
    except ImportError as e:
        raise UsageError(str(e)) from None
    names = {f.name for f in dataclasses.fields(flower.Federation)}
    try:
        fed = flower.Federation(**{k: v for k, v in vars(args).items() if k in names and v is not None})
    except ValueError as e:
        raise UsageError(str(e)) from None
    if fed.shard_cache is not None:  # checked here, not by each client in the middle of its round
        try:
            os.makedirs(fed.shard_cache, exist_ok=True)
        except OSError as e:
            raise UsageError(f"--shard-cache {fed.shard_cache}: cannot make that folder ({e.strerror})") from None
        if not os.access(fed.shard_cache, os.W_OK | os.X_OK):
            raise UsageError(f"--shard-cache {fed.shard_cache}: this user cannot write there; give a writable folder")
    try:  # every client of a simulation runs on this machine: a device it lacks fails here, once, not in each
        flower.check_opencl_gpu(fed.device)
    except (ValueError, RuntimeError) as e:
        raise UsageError(str(e) if str(e).startswith("--device") else f"--device {fed.device}: {e}") from None
    if args.download and not args.synthetic and tfdata.find_data_dir(args.data) is None:
        tfdata.download(tfdata.data_root(args.data))
    try:
        flower.simulate(fed, log=lambda row: print(json.dumps(row), flush=True))
    except flower.Stopped as e:
        print(f"tfplus federated simulate: {e}", file=sys.stderr)
        return EXIT_ON_SIGNAL[e.signum]
    except flower.TooFewReplies as e:
        print(f"tfplus federated simulate: error: {e}", file=sys.stderr)
        return 1
    if fed.out is None:
        print("tfplus federated simulate: note: no --out, so the global model was not saved", file=sys.stderr)
    return 0
