"""Checks that a PyTorch mirror (torch_reference.py's MobileNet, torch_seqnet.py's SeqNet) trains with the same
recipe as `tfplus train`: both start from the same weights (tfplus's, copied into the mirror), see the same
batches and take the same steps; the per-step losses should then agree to float32 rounding, and later drift
apart no more than the mirror does from itself started from weights x (1 + 1e-6 noise) (the "torch-torch'"
column: how far rounding alone takes two runs apart once the learning rate is large).

    OPENBLAS_NUM_THREADS=1 python benchmarks/mirror_check.py --data DIR --model mobilenet \
        --widths 8,16,32,32,64 --batch-size 64 --warmup-steps 50 --steps 200 --every 10
    OPENBLAS_NUM_THREADS=1 python benchmarks/mirror_check.py --data DIR --model seqnet --widths 32,64,64 \
        --batch-size 32 --optimizer adam --lr 0.003 --warmup-steps 50 --steps 150 --every 10

The tfplus side is tfplus.trainer.build_graph (what `tfplus train` runs, default recipe unless told) on
--device (cpu); the mirror side is the mirror's model and torch_reference.make_optimizer. Prints the
cross-entropy of each every --every steps, checks that both use the same learning rate at every step, and at
the end prints the mean differences and each one's accuracy on --test test images (in evaluation mode: moving
statistics). Needs torch (pip install torch).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

import tfplus as tf
from tfplus import data as tfdata
from tfplus import trainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch_reference  # noqa: E402  (a script beside this one)
import torch_seqnet  # noqa: E402


def _mobilenet_names(model: torch.nn.Module) -> list[str]:
    """The mirror's state_dict keys in tfplus's variable order (the same layer order: conv, its BN, ...)."""
    return [k for k in model.state_dict() if not k.endswith("num_batches_tracked")]


def _seqnet_names(model: torch.nn.Module, tf_names: list[str]) -> list[str]:
    """tfplus.graphs.seqnet's variable names mapped to torch_seqnet.SeqNet's state_dict keys."""
    bn = {"gamma": "weight", "beta": "bias", "moving_mean": "running_mean", "moving_variance": "running_var"}
    cell = {"gates/kernel": "gate_kernel", "gates/bias": "gate_bias", "candidate/kernel": "cand_kernel",
            "candidate/bias": "cand_bias", "kernel": "kernel", "bias": "bias"}
    out = []
    for name in tf_names:
        parts = name.split("/")
        if parts[0] == "conv1d":
            out.append("conv.weight")
        elif parts[0] in ("bn1", "bn2"):
            out.append(f"{parts[0]}.{bn[parts[1]]}")
        elif parts[0] == "logits":
            out.append("logits.weight" if parts[1] == "kernel" else "logits.bias")
        else:  # rnnK/[fw|bw/]gru_cell/gates/kernel
            direction = 1 if parts[1] == "bw" else 0
            tail = "/".join(parts[3:] if parts[1] in ("fw", "bw") else parts[2:])
            out.append(f"{parts[0]}.{direction}.cell.{cell[tail]}")
    return out


def _to_torch(name: str, value: np.ndarray, target: torch.Tensor) -> torch.Tensor:
    """A tfplus variable's value in the mirror's layout: conv HWIO -> OIHW, depthwise (H, W, C, 1) ->
    (C, 1, H, W), conv1d (K, I, O) -> (O, I, K), dense (in, out) -> (out, in); RNN kernels as they are."""
    if value.ndim == 4:
        value = value.transpose(2, 3, 0, 1) if "depthwise" in name else value.transpose(3, 2, 0, 1)
    elif value.ndim == 3:
        value = value.transpose(2, 1, 0)
    elif value.ndim == 2 and tuple(target.shape) != value.shape:
        value = value.T
    if tuple(target.shape) != value.shape:
        raise ValueError(f"{name}: tfplus shape {value.shape} does not fit the mirror's {tuple(target.shape)}")
    return torch.from_numpy(np.ascontiguousarray(value))


class _Mirror:
    """The PyTorch mirror from tfplus's initial weights (times 1 + perturb * standard normal noise), with the
    mirror's optimizer and schedule."""

    def __init__(self, model_name, widths, tf_names, values, cfg, total, perturb):
        if model_name == "mobilenet":
            self.model = torch_reference.MobileNet(widths or torch_reference.MobileNet.WIDTHS)
            keys = _mobilenet_names(self.model)
        else:
            self.model = torch_seqnet.SeqNet(widths or (64, 128, 128))
            keys = _seqnet_names(self.model, tf_names)
        state = self.model.state_dict()
        if len(keys) != len(tf_names):
            raise SystemExit(f"{len(tf_names)} tfplus variables but {len(keys)} mirror tensors: the models differ")
        rng = np.random.default_rng(1)
        noisy = [v * (1 + perturb * rng.standard_normal(v.shape)).astype(v.dtype) if perturb else v for v in values]
        self.model.load_state_dict({**state, **{k: _to_torch(n, v, state[k])
                                                for k, n, v in zip(keys, tf_names, noisy)}})
        self.opt, self.sched = torch_reference.make_optimizer(self.model, self.model.decayed(), cfg.optimizer,
                                                              cfg.lr, cfg.momentum, cfg.weight_decay, total,
                                                              cfg.warmup_steps)

    def step(self, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
        """(cross-entropy, learning rate) of one training step."""
        loss = torch.nn.functional.cross_entropy(self.model(torch.from_numpy(x)),
                                                 torch.from_numpy(y.astype(np.int64)))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        lr = self.opt.param_groups[0]["lr"]
        self.opt.step()
        self.sched.step()
        return loss.item(), lr


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="the folder of cifar-10-batches-bin")
    p.add_argument("--model", choices=("mobilenet", "seqnet"), default="mobilenet")
    p.add_argument("--widths", help="as tfplus train --widths (default: the model's)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--epochs", type=int, default=15,
                   help="the run whose first --steps are taken (sets the cosine schedule's length)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--optimizer", choices=("momentum", "adam"), default="momentum")
    p.add_argument("--lr", type=float)
    p.add_argument("--warmup-steps", type=int, help="default: one epoch, as tfplus train")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="tfplus device: cpu or opencl")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1: a shared machine)")
    p.add_argument("--perturb", type=float, default=1e-6,
                   help="relative noise on a second mirror's initial weights (the chaos floor)")
    p.add_argument("--every", type=int, default=25, help="print every this many steps")
    p.add_argument("--test", type=int, default=2000, help="test images evaluated at the end")
    args = p.parse_args()

    widths = tuple(int(w) for w in args.widths.split(",")) if args.widths else None
    cfg = trainer.resolve(trainer.TrainConfig(model=args.model, conv_widths=widths, batch_size=args.batch_size,
                                              epochs=args.epochs, optimizer=args.optimizer, lr=args.lr,
                                              seed=args.seed))
    dataset, _ = trainer.load_data(args.data)
    spe = len(dataset.train_labels) // cfg.batch_size
    total = cfg.epochs * spe
    cfg.warmup_steps = trainer.default_warmup(spe) if args.warmup_steps is None else args.warmup_steps
    tg = trainer.build_graph(cfg, total)
    sess = tf.Session(graph=tg.graph, device=args.device)
    sess.run(tg.init_op)
    variables = trainer.model_variables(tg)
    tf_names = [v.op.name for v in variables]

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    values = sess.run(variables)
    mirrors = [_Mirror(args.model, widths, tf_names, values, cfg, total, 0.0),
               _Mirror(args.model, widths, tf_names, values, cfg, total, args.perturb)]
    print(f"{args.model} {widths or 'default widths'}: {len(tf_names)} variables copied into the mirror; "
          f"{cfg.optimizer} lr {cfg.lr}, {args.steps} of {total} steps, warm-up {cfg.warmup_steps}, batch "
          f"{cfg.batch_size}; torch' = the mirror from weights x (1 + {args.perturb:g} noise): the float32 "
          "chaos floor", flush=True)

    mirror_batches = torch_reference.batches(dataset.train_images, dataset.train_labels.astype(np.int64),
                                             cfg.batch_size, cfg.seed, 0)
    diffs, floor, t_tf, t_torch = [], [], 0.0, 0.0
    print(f"{'step':>5} {'lr':>9} {'tfplus xent':>12} {'torch xent':>12} {'|diff|':>9} {'torch-torch|':>12}")
    with tfdata.train_batches(dataset, cfg.batch_size, seed=cfg.seed, augment=cfg.augment) as batches:
        for step in range(1, args.steps + 1):
            x, y = next(batches)
            if step == 1:  # the mirror's own pipeline yields the very same first batch
                mx, my = next(mirror_batches)
                if not (np.allclose(mx.numpy(), x, atol=1e-5) and np.array_equal(my.numpy(), y)):
                    raise SystemExit("the mirror's first batch differs from tfplus.data's")
            t0 = time.perf_counter()
            _, xent, lr = sess.run([tg.train_op, tg.cross_entropy, tg.learning_rate], {tg.images: x, tg.labels: y})
            t1 = time.perf_counter()
            (loss, torch_lr), (other, _) = (m.step(x, y) for m in mirrors)
            t_tf, t_torch = t_tf + t1 - t0, t_torch + (time.perf_counter() - t1) / 2
            diffs.append(abs(float(xent) - loss))
            floor.append(abs(other - loss))
            if abs(torch_lr - float(lr)) > 1e-6 * max(abs(torch_lr), 1e-3):
                raise SystemExit(f"step {step}: tfplus lr {float(lr):.6g}, the mirror's {torch_lr:.6g}")
            if step % args.every == 0 or step == 1:
                print(f"{step:5d} {float(lr):9.5f} {float(xent):12.5f} {loss:12.5f} {diffs[-1]:9.5f} "
                      f"{floor[-1]:12.5f}", flush=True)
    n = min(args.test, len(dataset.test_labels))
    test_x, labels = tfdata.normalize(dataset.test_images[:n]), dataset.test_labels[:n]
    tf_pred = np.concatenate([sess.run(tg.predictions, {tg.images: test_x[i:i + 500]}) for i in range(0, n, 500)])
    model = mirrors[0].model.eval()
    with torch.no_grad():
        torch_pred = np.concatenate([model(torch.from_numpy(test_x[i:i + 500])).argmax(1).numpy()
                                     for i in range(0, n, 500)])
    last = min(50, len(diffs))
    print(f"|tfplus - torch|: max {max(diffs):.5f}, mean over the last {last} steps {np.mean(diffs[-last:]):.5f}; "
          f"|torch - torch'|: max {max(floor):.5f}, mean {np.mean(floor[-last:]):.5f}")
    print(f"test accuracy on {len(labels)} images: tfplus {100 * np.mean(tf_pred == labels):.2f}%, "
          f"mirror {100 * np.mean(torch_pred == labels):.2f}%")
    print(f"step time: tfplus {t_tf / args.steps:.3f} s, mirror {t_torch / args.steps:.3f} s")


if __name__ == "__main__":
    main()
