"""tf.data's interleave, flat_map and list_files (TF1), and the order in which interleaving takes elements, shared
with the file readers' num_parallel_reads (tfplus.data.readers).

    files = tf.data.Dataset.list_files("data/train-*.tfrecord", shuffle=False)
    records = files.interleave(tf.data.TFRecordDataset, cycle_length=4, block_length=2)
"""
from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Iterator
from typing import Callable

import numpy as np

from tfplus.data.dataset_ops import AUTOTUNE, Dataset, _Derived, _flatten, trace


def interleave_streams(sources: Iterable[Callable[[], Iterator]], cycle: int, block: int) -> Iterator:
    """The elements of the streams that `sources` make, as TensorFlow's interleave takes them: `cycle` slots
    visited in turn, `block` elements from each; a finished stream frees its slot, which the next source fills
    when the turn comes back to it."""
    pending = iter(sources)
    slots: list = [None] * cycle
    exhausted, index = False, 0
    while not exhausted or any(s is not None for s in slots):
        if slots[index] is None and not exhausted:
            make = next(pending, None)
            if make is None:
                exhausted = True
            else:
                slots[index] = make()
        if slots[index] is not None:
            taken = 0
            for element in slots[index]:
                yield element
                taken += 1
                if taken == block:
                    break
            if taken < block:  # the stream ended: its slot is free
                slots[index] = None
        index = (index + 1) % cycle


class Interleave(_Derived):
    """Dataset.interleave / flat_map: map_func, traced once in a graph of its own, makes a dataset of each input
    element; the datasets' elements are interleaved. A session of its own computes, per element, the tensors
    the made dataset was built from (the element itself, a file name derived from it, ...)."""

    def __init__(self, dataset: Dataset, fn: Callable, cycle_length, block_length: int):
        self._inputs = (dataset,)
        self._cycle = os.cpu_count() or 1 if cycle_length in (None, AUTOTUNE) else int(cycle_length)
        self._block = int(block_length)
        if self._cycle < 1 or self._block < 1:
            raise ValueError(f"tf.data.Dataset.interleave: cycle_length ({cycle_length}) and block_length "
                             f"({block_length}) must be positive")
        self._graph, self._args, inner = trace(dataset, fn)
        if not isinstance(inner, Dataset):
            raise TypeError(f"tf.data.Dataset.interleave / flat_map: the function must return a Dataset, got "
                            f"{type(inner).__name__}")
        self._inner, self._structure, self._session = inner, inner._structure, None

    def _values_for(self, element) -> dict:
        parts = list(zip(self._args, _flatten(element)))
        rows = {id(a): v for a, v in parts if isinstance(a, Dataset)}   # a window's components: their elements
        captured = self._inner._captured()
        if not captured:
            return rows
        if self._session is None:
            from tfplus.engine.session import Session  # the interleave's own session, made when it first runs
            self._session = Session(graph=self._graph, device="cpu")  # an input pipeline runs on the host, as in TF
        values = self._session.run(captured, {a: v for a, v in parts if not isinstance(a, Dataset)})
        return {**rows, **{id(t): v for t, v in zip(captured, values)}}

    def _elements(self, values):
        sources = (lambda e=e: self._inner._elements(self._values_for(e)) for e in self._inputs[0]._elements(values))
        return interleave_streams(sources, self._cycle, self._block)


def list_files(file_pattern, shuffle=None, seed=None) -> Dataset:
    """The names of the files matching `file_pattern` (a glob, or a list of them), sorted; shuffled unless
    shuffle=False (TF's default shuffles: pass shuffle=False for a fixed order)."""
    patterns = [file_pattern] if isinstance(file_pattern, (str, bytes)) else list(file_pattern)
    names = sorted({f for p in patterns for f in glob.glob(p.decode() if isinstance(p, bytes) else p)})
    if not names:
        from tfplus import errors
        raise errors.InvalidArgumentError(None, None, f"Expected 'file_pattern' argument {file_pattern!r} to match "
                                          "at least one file")
    files = Dataset.from_tensor_slices(np.array([n.encode() for n in names], object))
    return files if shuffle is False else files.shuffle(len(names), seed=seed)
