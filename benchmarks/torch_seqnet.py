"""PyTorch reference for `tfplus train --model seqnet[-lstm|-bi|-bilstm]`: the same sequence classifier, data
pipeline and recipe, for comparing accuracy.

    pip install torch==2.13.0
    python benchmarks/torch_seqnet.py --data /path/to/cifar-10-batches-bin --model seqnet --epochs 15 \
        --optimizer adam --lr 0.003 --device cuda
    tfplus train --data /path/to/cifar-10-batches-bin --model seqnet --epochs 15 --optimizer adam --lr 0.003 \
        --device opencl

Data, augmentation, batching and the learning-rate schedule (cosine to 0 with a one-epoch linear warm-up) come
from benchmarks/torch_reference.py, which mirrors tfplus.data and the trainer. The model is tfplus.graphs.seqnet
with TensorFlow 1's cells written out (PyTorch's nn.GRU applies the reset gate after the recurrent matmul, TF's
GRUCell before it; TF's LSTM adds forget_bias 1 to the forget gate): each image read as 32 rows of 96 features
(pixel-major, channels together), Conv1D 3 SAME no bias (He-normal) -> BN -> ReLU -> RNN -> BN -> RNN ->
per-step dense -> mean over time. BN momentum 0.9 (PyTorch 0.1), epsilon 1e-3; RNN kernels Glorot-uniform
over TF's concatenated [input; state] kernel, GRU gate biases 1; weight decay (5e-4, L2 as TF's l2_loss) on
every kernel, not on biases or BN.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling, also under python -P (the GPU machine)
from torch_reference import _he_normal_, batches, evaluate, make_optimizer, read_cifar, strict_fp32  # noqa: E402


def _glorot(rows: int, cols: int) -> nn.Parameter:
    limit = math.sqrt(6.0 / (rows + cols))
    return nn.Parameter(torch.empty(rows, cols).uniform_(-limit, limit))


class TFGRUCell(nn.Module):
    """tf.nn.rnn_cell.GRUCell: r, u = sigmoid([x, h] Wg + bg); c = tanh([x, r h] Wc + bc); h' = u h + (1-u) c."""

    def __init__(self, depth: int, units: int):
        super().__init__()
        self.gate_kernel, self.gate_bias = _glorot(depth + units, 2 * units), nn.Parameter(torch.ones(2 * units))
        self.cand_kernel, self.cand_bias = _glorot(depth + units, units), nn.Parameter(torch.zeros(units))
        self.units = units

    def zero_state(self, x):
        return x.new_zeros(x.shape[0], self.units)

    def forward(self, x, h):
        r, u = torch.sigmoid(torch.cat([x, h], 1) @ self.gate_kernel + self.gate_bias).chunk(2, 1)
        c = torch.tanh(torch.cat([x, r * h], 1) @ self.cand_kernel + self.cand_bias)
        h = u * h + (1 - u) * c
        return h, h


class TFLSTMCell(nn.Module):
    """tf.nn.rnn_cell.LSTMCell: i, j, f, o = [x, h] W + b; c' = c sig(f + 1) + sig(i) tanh(j); h' = tanh(c') sig(o)."""

    def __init__(self, depth: int, units: int):
        super().__init__()
        self.kernel, self.bias = _glorot(depth + units, 4 * units), nn.Parameter(torch.zeros(4 * units))
        self.units = units

    def zero_state(self, x):
        z = x.new_zeros(x.shape[0], self.units)
        return (z, z)

    def forward(self, x, state):
        c, h = state
        i, j, f, o = (torch.cat([x, h], 1) @ self.kernel + self.bias).chunk(4, 1)
        c = c * torch.sigmoid(f + 1.0) + torch.sigmoid(i) * torch.tanh(j)
        h = torch.tanh(c) * torch.sigmoid(o)
        return h, (c, h)


class RNN(nn.Module):
    """A cell over (N, T, D), forward or backward in time (then its outputs in input order)."""

    def __init__(self, cell: nn.Module, reverse: bool = False):
        super().__init__()
        self.cell, self.reverse = cell, reverse

    def forward(self, x):
        state, outs = self.cell.zero_state(x[:, 0]), []
        steps = range(x.shape[1] - 1, -1, -1) if self.reverse else range(x.shape[1])
        for t in steps:
            out, state = self.cell(x[:, t], state)
            outs.append(out)
        return torch.stack(outs[::-1] if self.reverse else outs, 1)


class SeqNet(nn.Module):
    def __init__(self, widths=(64, 128, 128), cell: str = "gru", bidirectional: bool = False, classes: int = 10):
        super().__init__()
        make = TFGRUCell if cell == "gru" else TFLSTMCell
        conv, u1, u2 = widths
        k = 2 if bidirectional else 1
        self.conv = nn.Conv1d(96, conv, 3, padding=1, bias=False)
        _he_normal_(self.conv.weight)
        self.bn1 = nn.BatchNorm1d(conv, eps=1e-3, momentum=0.1)
        self.bn2 = nn.BatchNorm1d(k * u1, eps=1e-3, momentum=0.1)
        self.rnn1 = nn.ModuleList([RNN(make(conv, u1))] + ([RNN(make(conv, u1), True)] if bidirectional else []))
        self.rnn2 = nn.ModuleList([RNN(make(k * u1, u2))] + ([RNN(make(k * u1, u2), True)] if bidirectional else []))
        self.logits = nn.Linear(k * u2, classes)
        nn.init.xavier_uniform_(self.logits.weight)
        nn.init.zeros_(self.logits.bias)

    def decayed(self) -> list:
        """The kernels (TF's WEIGHTS collection in tfplus.graphs.seqnet)."""
        return [self.conv.weight, self.logits.weight] + [p for n, p in self.named_parameters() if "kernel" in n]

    def forward(self, images):                                          # (N, 3, 32, 32)
        x = images.permute(0, 2, 3, 1).reshape(images.shape[0], 32, 96)  # rows as steps, channels together
        h = torch.relu(self.bn1(self.conv(x.transpose(1, 2)))).transpose(1, 2)
        h = torch.cat([r(h) for r in self.rnn1], 2)
        h = self.bn2(h.transpose(1, 2)).transpose(1, 2)
        h = torch.cat([r(h) for r in self.rnn2], 2)
        return self.logits(h).mean(1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="folder with data_batch_1.bin .. test_batch.bin")
    p.add_argument("--model", choices=("seqnet", "seqnet-lstm", "seqnet-bi", "seqnet-bilstm"), default="seqnet")
    p.add_argument("--widths", default="64,128,128", help="Conv1D filters, RNN 1 units, RNN 2 units")
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--steps", type=int, help="train this many steps, not whole epochs (as tfplus train --steps)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--optimizer", choices=("adam", "momentum"), default="adam")
    p.add_argument("--lr", type=float, default=0.003)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="torch device, e.g. cuda (default cpu)")
    p.add_argument("--tf32", action="store_true", help="let CUDA use TF32 (default: float32, as tfplus)")
    args = p.parse_args()
    strict_fp32(args.tf32)

    torch.manual_seed(args.seed)
    train_x, train_y, test_x, test_y = read_cifar(Path(args.data).expanduser())
    device = torch.device(args.device)
    model = SeqNet(tuple(int(w) for w in args.widths.split(",")), "lstm" if "lstm" in args.model else "gru",
                   "-bi" in args.model).to(device)
    steps_per_epoch = len(train_y) // args.batch_size
    total = args.steps or args.epochs * steps_per_epoch
    # One epoch of warm-up however short the run, as tfplus train's default.
    opt, sched = make_optimizer(model, model.decayed(), args.optimizer, args.lr, 0.9, args.weight_decay, total,
                                steps_per_epoch)
    loss_fn = nn.CrossEntropyLoss()
    print(f"torch {torch.__version__} on {device}: {args.model}, {sum(q.numel() for q in model.parameters())} "
          f"parameters, {total} steps", flush=True)
    step, acc = 0, 0.0
    for epoch in range(math.ceil(total / steps_per_epoch)):
        t0, loss_sum, seen = time.perf_counter(), 0.0, 0
        for x, y in batches(train_x, train_y, args.batch_size, args.seed, epoch):
            x, y = x.to(device), y.to(device)
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            loss_sum, seen = loss_sum + loss.item() * len(y), seen + len(y)
            if args.steps and step >= args.steps:
                break
        seconds = time.perf_counter() - t0
        acc = evaluate(model, test_x, test_y, device)
        print(f"epoch {epoch + 1:2d}  train loss {loss_sum / seen:.4f}  test acc {100 * acc:.2f}%  "
              f"{seconds:.1f} s/epoch", flush=True)
        if args.steps and step >= args.steps:
            break
    print(f"final test acc {100 * acc:.2f}%", flush=True)


if __name__ == "__main__":
    main()
