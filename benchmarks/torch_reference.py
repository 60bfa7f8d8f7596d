"""PyTorch reference for `tfplus train`: the same Mentee (or MobileNet, --model mobilenet), data pipeline and
recipe, for comparing accuracy.

    pip install torch==2.13.0                        # optional extra: pip install 'tfplus[bench]'
    python benchmarks/torch_reference.py --data /path/to/cifar-10-batches-bin --epochs 15 --seed 0

Self-contained (NumPy + PyTorch; it does not import tfplus) so that it checks tfplus rather than repeats it.
Matches `tfplus train`'s defaults:
- data: the CIFAR-10 binary files read with NumPy; per epoch a fresh permutation, batches of 128 with the
  last partial batch dropped (390 steps); pad-4 random crop + horizontal flip; (x/255 - mean) / std per
  channel. The random draws use the same NumPy generators keyed by (seed, stream, epoch, batch) as
  tfplus.data, so both frameworks see the very same batches for the same seed.
- model: Mentee, conv3x3 pad 1: 32, 32, pool, 64, 64, pool, 128, pool; FC 2048-256-128-10; ReLU; NCHW.
  Weights He-normal truncated at 2 std as TF's he_normal (std sqrt(2/fan_in)/0.8796), biases zero.
- recipe: SGD, momentum 0.9, Nesterov, lr 0.05 reached by a linear warm-up (t + 1) / W over W = one epoch
  (390 steps; without it most seeds diverge or die within ten steps, as in tfplus), then decayed per step by a
  cosine to 0 over the remaining steps; weight decay 5e-4 on conv/FC weights only (TF's weight_decay *
  l2_loss(w) = wd * sum(w^2) / 2 has gradient wd * w, as PyTorch's weight_decay=wd); mean cross-entropy;
  15 epochs.
Prints the test accuracy and seconds per epoch (training only) after each epoch.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

MEAN = np.array((0.4914, 0.4822, 0.4465), np.float32)
STD = np.array((0.2470, 0.2435, 0.2616), np.float32)
RECORD = 1 + 3 * 32 * 32


def read_cifar(folder: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train images uint8 (50000, 3, 32, 32), train labels, test images, test labels) from the .bin files."""
    if not (folder / "data_batch_1.bin").is_file() and (folder / "cifar-10-batches-bin").is_dir():
        folder = folder / "cifar-10-batches-bin"

    def read(name):
        raw = np.fromfile(folder / name, np.uint8).reshape(-1, RECORD)
        return raw[:, 1:].reshape(-1, 3, 32, 32), raw[:, 0].astype(np.int64)

    train = [read(f"data_batch_{i}.bin") for i in range(1, 6)]
    test_x, test_y = read("test_batch.bin")
    return np.concatenate([x for x, _ in train]), np.concatenate([y for _, y in train]), test_x, test_y


def normalize(images: np.ndarray) -> np.ndarray:
    return ((images.astype(np.float32) / 255 - MEAN[:, None, None]) / STD[:, None, None]).astype(np.float32)


def augment(images: np.ndarray, rng: np.random.Generator, pad: int = 4) -> np.ndarray:
    """Random crop of the zero-padded image and a coin-flip mirror (draws offsets (2, n), then flips (n,))."""
    n, _, h, w = images.shape
    top, left = rng.integers(0, 2 * pad + 1, (2, n))
    flip = rng.random(n) < 0.5
    padded = np.pad(images, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.empty_like(images)
    for i in range(n):
        crop = padded[i, :, top[i]:top[i] + h, left[i]:left[i] + w]
        out[i] = crop[:, :, ::-1] if flip[i] else crop
    return out


def batches(images, labels, batch_size, seed, epoch):
    """One epoch of (x, y) batches, the last partial batch dropped."""
    order = np.random.default_rng((seed, 0, epoch, 0)).permutation(len(labels))
    for i in range(len(labels) // batch_size):
        take = order[i * batch_size:(i + 1) * batch_size]
        x = augment(images[take], np.random.default_rng((seed, 1, epoch, i)))
        yield torch.from_numpy(normalize(x)), torch.from_numpy(labels[take])


class Mentee(nn.Module):
    def __init__(self, widths=(32, 32, 64, 64, 128), pools=(1, 3, 4), fc=(256, 128), classes=10):
        super().__init__()
        layers, c = [], 3
        for i, w in enumerate(widths):
            layers += [nn.Conv2d(c, w, 3, padding=1), nn.ReLU()]
            if i in pools:
                layers.append(nn.MaxPool2d(2))
            c = w
        side = 32 // 2 ** len(pools)
        self.features = nn.Sequential(*layers)
        self.classifier = _classifier(c * side * side, fc, classes)
        _he_init(self)

    def forward(self, x):
        return self.classifier(self.features(x))

    def blocks(self) -> nn.Sequential:
        """The model as a sequence of blocks, its own modules (for checkpoint_sequential): each conv with its
        ReLU (and pool), then each FC with its ReLU (the first with the flatten)."""
        return nn.Sequential(*_cut(self.features, nn.Conv2d), *_cut(self.classifier, nn.Linear))


def _classifier(features: int, fc, classes: int) -> nn.Sequential:
    """Flatten, the hidden FC layers with their ReLUs, the logits layer."""
    dims, head = [features, *fc], []
    for a, b in zip(dims, dims[1:]):
        head += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(nn.Flatten(), *head, nn.Linear(dims[-1], classes))


def _he_init(model: nn.Module) -> None:
    """Conv and FC weights He-normal truncated at 2 std (TF's he_normal), biases zero."""
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            _he_normal_(m.weight)
            nn.init.zeros_(m.bias)


class LeNet(nn.Module):
    """tfplus.graphs.lenet: conv5x5 VALID 6, pool, conv5x5 VALID 16, pool; FC 400-120-84-10; ReLU; NCHW."""

    def __init__(self, widths=(6, 16), fc=(120, 84), classes=10):
        super().__init__()
        layers, c, side = [], 3, 32
        for w in widths:
            layers += [nn.Conv2d(c, w, 5), nn.ReLU(), nn.MaxPool2d(2)]
            c, side = w, (side - 4) // 2
        self.features = nn.Sequential(*layers)
        self.classifier = _classifier(c * side * side, fc, classes)
        _he_init(self)

    def forward(self, x):
        return self.classifier(self.features(x))


def _cut(layers, kind) -> list:
    """`layers` in groups that each run from a module of type `kind` to the next one (what precedes the first
    such module joins its group)."""
    groups: list = [[]]
    for m in layers:
        if isinstance(m, kind) and any(isinstance(x, kind) for x in groups[-1]):
            groups.append([])
        groups[-1].append(m)
    return [nn.Sequential(*g) for g in groups]


class _GlobalMean(nn.Module):
    def forward(self, x):
        return x.mean((2, 3))


def _he_normal_(weight) -> None:
    """TF's he_normal: a normal truncated at 2 std, std sqrt(2 / fan_in) / 0.8796 (the truncation's shrink)."""
    std = math.sqrt(2.0 / weight[0].numel()) / 0.87962566103423978
    nn.init.trunc_normal_(weight, 0.0, std, -2 * std, 2 * std)


class _TFSame(nn.Module):
    """TF's SAME padding for a 3x3 window: 1 on each side at stride 1; at stride 2 on an even size, 0 before
    and 1 after (TF puts the odd pixel of padding at the end; PyTorch's padding=1 would shift the grid)."""

    def __init__(self, stride: int):
        super().__init__()
        self.pad = (1, 1, 1, 1) if stride == 1 else (0, 1, 0, 1)

    def forward(self, x):
        return nn.functional.pad(x, self.pad)


class MobileNet(nn.Module):
    """tfplus.graphs.mobilenet: conv3x3 (no bias) + BN + ReLU6, then per block a 3x3 depthwise conv (stride 2
    where the width grows, except the first block) + BN + ReLU6 and a 1x1 conv + BN + ReLU6; global average
    pool; a linear layer. BN as tf.layers.batch_normalization(momentum=0.9, epsilon=1e-3) (PyTorch's momentum
    is 1 - TF's; both keep the Bessel-corrected variance). Init: convs and the linear layer TF he_normal,
    depthwise normal with std sqrt(2 / 9), zero bias; weight decay on the convs' and linear weights only."""

    WIDTHS = (32, 64, 128, 128, 256, 256, 512, 512, 512, 512, 512, 512, 1024, 1024)

    def __init__(self, widths=WIDTHS, classes=10):
        super().__init__()

        def bn(c):
            return nn.BatchNorm2d(c, eps=1e-3, momentum=0.1)
        layers = [_TFSame(1), nn.Conv2d(3, widths[0], 3, bias=False), bn(widths[0]), nn.ReLU6()]
        for i in range(1, len(widths)):
            c, w = widths[i - 1], widths[i]
            stride = 2 if i > 1 and w > c else 1
            dw, pw = nn.Conv2d(c, c, 3, stride, groups=c, bias=False), nn.Conv2d(c, w, 1, bias=False)
            nn.init.normal_(dw.weight, 0.0, math.sqrt(2.0 / 9))
            _he_normal_(pw.weight)
            layers += [_TFSame(stride), dw, bn(c), nn.ReLU6(), pw, bn(w), nn.ReLU6()]
        _he_normal_(layers[1].weight)
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(widths[-1], classes)
        _he_normal_(self.classifier.weight)
        nn.init.zeros_(self.classifier.bias)

    def decayed(self) -> list:
        """The weights tfplus decays (its WEIGHTS collection): the full convs' and the linear layer's."""
        convs = [m.weight for m in self.features if isinstance(m, nn.Conv2d) and m.groups == 1]
        return convs + [self.classifier.weight]

    def forward(self, x):
        return self.classifier(self.features(x).mean((2, 3)))

    def blocks(self) -> nn.Sequential:
        """The model as a sequence of blocks, its own modules (for checkpoint_sequential): the stem, each
        depthwise separable block (from its padding on), the pooled classifier."""
        return nn.Sequential(*_cut(self.features, _TFSame), nn.Sequential(_GlobalMean(), self.classifier))


def strict_fp32(allow_tf32: bool = False) -> None:
    """float32 arithmetic as tfplus's kernels: PyTorch on CUDA runs cuDNN convolutions in TF32 by default
    (10-bit mantissas on Ampere and later); off unless allow_tf32."""
    torch.backends.cudnn.allow_tf32 = allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allow_tf32


class TFAdam(torch.optim.Optimizer):
    """TF1's AdamOptimizer: w -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps). PyTorch's Adam adds
    eps to the bias-corrected sqrt(v), i.e. a smaller eps early on; weight decay as PyTorch's (L2 into g)."""

    def __init__(self, params, lr=0.001, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad + group["weight_decay"] * p if group["weight_decay"] else p.grad
                state = self.state[p]
                if not state:
                    state.update(t=0, m=torch.zeros_like(p), v=torch.zeros_like(p))
                state["t"] += 1
                state["m"].mul_(b1).add_(g, alpha=1 - b1)
                state["v"].mul_(b2).addcmul_(g, g, value=1 - b2)
                lr_t = group["lr"] * math.sqrt(1 - b2 ** state["t"]) / (1 - b1 ** state["t"])
                p.addcdiv_(state["m"], state["v"].sqrt().add_(group["eps"]), value=-lr_t)


def make_optimizer(model: nn.Module, decayed: list, name: str, lr: float, momentum: float, weight_decay: float,
                   total: int, warmup: int):
    """(optimizer, LambdaLR) as tfplus's training_graph: 'momentum' (SGD, Nesterov) or 'adam'; weight decay on
    `decayed` only (TF's weight_decay * l2_loss(w) has gradient weight_decay * w, PyTorch's weight_decay); step
    t (0-based) trains at lr * (t + 1) / warmup during the warm-up, then at lr * (1 + cos(pi (t - warmup) /
    (total - warmup))) / 2 (warmup 0: none), as tfplus.graphs.mentee.learning_rate_schedule."""
    others = [q for q in model.parameters() if all(q is not w for w in decayed)]
    groups = [{"params": decayed, "weight_decay": weight_decay}, {"params": others, "weight_decay": 0.0}]
    opt = TFAdam(groups, lr=lr) if name == "adam" else \
        torch.optim.SGD(groups, lr=lr, momentum=momentum, nesterov=True)

    def factor(t: int) -> float:
        decay = max(total - warmup, 1)
        return 0.5 * (1 + math.cos(math.pi * min(max(t - warmup, 0), decay) / decay)) * \
            min(1.0, (t + 1) / max(warmup, 1))
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


def evaluate(model, images, labels, device, batch_size=500) -> float:
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(labels), batch_size):
            x = torch.from_numpy(normalize(images[i:i + batch_size])).to(device)
            correct += int((model(x).argmax(1).cpu().numpy() == labels[i:i + batch_size]).sum())
    model.train()
    return correct / len(labels)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True,
                   help="folder with data_batch_1.bin .. test_batch.bin (or its parent)")
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--steps", type=int,
                   help="stop after this many steps (smoke runs); the schedule still spans --epochs")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--warmup-steps", type=int,
                   help="linear warm-up steps (default: one epoch, as tfplus train, however short the run; 0: none)")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, help="torch threads (default: PyTorch's choice)")
    p.add_argument("--log", help="append one JSON object per epoch")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cuda (default cpu)")
    p.add_argument("--model", choices=("mentee", "mobilenet"), default="mentee")
    p.add_argument("--widths", help="mobilenet: the stem's and each block's width, as tfplus train --widths")
    p.add_argument("--tf32", action="store_true", help="let CUDA use TF32 (default: float32, as tfplus)")
    args = p.parse_args()
    strict_fp32(args.tf32)

    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    train_x, train_y, test_x, test_y = read_cifar(Path(args.data).expanduser())
    device = torch.device(args.device)
    if args.model == "mobilenet":
        widths = tuple(int(w) for w in args.widths.split(",")) if args.widths else MobileNet.WIDTHS
        model = MobileNet(widths).to(device)
        weights = model.decayed()
    else:
        model = Mentee().to(device)
        weights = [m.weight for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    steps_per_epoch = len(train_y) // args.batch_size
    total = args.epochs * steps_per_epoch
    warmup = steps_per_epoch if args.warmup_steps is None else args.warmup_steps
    opt, sched = make_optimizer(model, weights, "momentum", args.lr, args.momentum, args.weight_decay, total,
                                warmup)
    loss_fn = nn.CrossEntropyLoss()
    print(f"torch {torch.__version__} on {device}, {torch.get_num_threads()} threads, "
          f"{sum(p.numel() for p in model.parameters())} parameters, {total} steps ({warmup} warm-up)",
          flush=True)
    step, best = 0, 0.0
    for epoch in range(args.epochs):
        t0, loss_sum, correct, seen = time.perf_counter(), 0.0, 0, 0
        for x, y in batches(train_x, train_y, args.batch_size, args.seed, epoch):
            x, y = x.to(device), y.to(device)
            logits = model(x)
            loss = loss_fn(logits, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            loss_sum += loss.item() * len(y)
            correct += int((logits.argmax(1) == y).sum())
            seen += len(y)
            if args.steps and step >= args.steps:
                break
        seconds = time.perf_counter() - t0
        acc = evaluate(model, test_x, test_y, device)
        best = max(best, acc)
        print(f"epoch {epoch + 1:2d}/{args.epochs}  train loss {loss_sum / seen:.4f} "
              f"acc {100 * correct / seen:.2f}%  test acc {100 * acc:.2f}%  {seconds:.1f} s/epoch "
              f"({seen / seconds:.0f} img/s)", flush=True)
        if args.log:
            with open(args.log, "a") as f:
                f.write(json.dumps({"epoch": epoch + 1, "step": step, "loss": loss_sum / seen,
                                    "accuracy": correct / seen, "test_accuracy": acc, "epoch_time_s": seconds,
                                    "seed": args.seed, "device": str(device)}) + "\n")
        if args.steps and step >= args.steps:
            break
    print(f"final test acc {100 * acc:.2f}%  best {100 * best:.2f}%", flush=True)


if __name__ == "__main__":
    main()
