"""Splitting CIFAR-10's training set over federated clients: the same shards for the same seed, everywhere.

A client computes its own shard from the labels alone (tfplus.data.cifar10.read_labels), so no process needs the
images of the others:

    shards = partition(train_labels, clients=10, spec="dirichlet:0.5", seed=0)   # 10 index arrays
"""
from __future__ import annotations

import numpy as np

SPECS = "iid, dirichlet:ALPHA (e.g. dirichlet:0.5; smaller is more skewed) or classes:K (K classes per client)"


def parse_spec(spec: str) -> tuple[str, float]:
    """('iid', 0), ('dirichlet', alpha) or ('classes', k) from a --partition value; ValueError naming SPECS."""
    kind, _, arg = spec.partition(":")
    try:
        if kind == "iid" and not arg:
            return "iid", 0.0
        if kind == "dirichlet" and float(arg) > 0 and np.isfinite(float(arg)):
            return "dirichlet", float(arg)
        if kind == "classes" and int(arg) >= 1:
            return "classes", int(arg)
    except ValueError:
        pass
    raise ValueError(f"partition {spec!r}: use {SPECS}")


def partition(labels: np.ndarray, clients: int, spec: str = "iid", seed: int = 0) -> list[np.ndarray]:
    """`clients` disjoint, sorted arrays of positions in `labels`, a pure function of its arguments.

    iid: a random permutation cut into equal parts. dirichlet:ALPHA: each class's examples are split over the
    clients in proportions drawn from Dirichlet(ALPHA) (Hsu et al. 2019). classes:K: client i holds classes
    i*K .. i*K+K-1 (mod the class count), each class's examples split evenly among the clients that hold it
    (McMahan et al. 2017's split; with clients*K < 10 some classes are held by none). A client may be left
    with no examples (Dirichlet, small ALPHA):
    the caller says so.
    """
    kind, arg = parse_spec(spec)
    if clients < 1:
        raise ValueError(f"partition: clients must be >= 1, got {clients}")
    rng = np.random.default_rng((seed, 0xFED))
    n_classes = int(labels.max()) + 1 if len(labels) else 0
    parts: list[list[np.ndarray]] = [[] for _ in range(clients)]
    if kind == "iid":
        for i, part in enumerate(np.array_split(rng.permutation(len(labels)), clients)):
            parts[i].append(part)
    elif kind == "dirichlet":
        for c in range(n_classes):
            members = rng.permutation(np.flatnonzero(labels == c))
            cuts = (np.cumsum(rng.dirichlet(np.full(clients, arg)))[:-1] * len(members)).astype(int)
            for i, part in enumerate(np.split(members, cuts)):
                parts[i].append(part)
    else:
        k = int(arg)
        if k > n_classes:
            raise ValueError(f"partition {spec!r}: K={k} is more than the labels' {n_classes} classes; give "
                             f"classes:1 .. classes:{n_classes}")
        holders: dict[int, list[int]] = {c: [] for c in range(n_classes)}
        for i in range(clients):
            for j in range(k):
                holders[(i * k + j) % n_classes].append(i)
        for c, who in holders.items():
            if who:
                members = rng.permutation(np.flatnonzero(labels == c))
                for i, part in zip(who, np.array_split(members, len(who))):
                    parts[i].append(part)
    return [np.sort(np.concatenate(p)) if p else np.zeros(0, np.int64) for p in parts]
