"""The trainer's device input (--input device): uint8 batches and crops fed, CifarAugment in the graph. The
batches, and so the losses, are those of the host pipeline for a seed; resume stays exact; budgets plan it."""
from __future__ import annotations

import json

import numpy as np
import pytest

import tfplus as tf
from tfplus import data as tfdata
from tfplus.cli import main
from tfplus.ops.image_ops import cifar_augment

# LeNet made narrow: where the batches come from is what these tests vary, and PoCL's unoptimized kernels (tests/
# conftest.py) took seconds a step of the full one.
SMALL = ["--synthetic", "--model", "lenet", "--widths", "4,8", "--fc-widths", "16", "--batch-size", "8",
         "--log-every", "1", "--no-eval"]


def _losses(path) -> list[float]:
    with open(path) as f:
        return [r["loss"] for r in map(json.loads, f) if r["kind"] == "step"]


def test_raw_batches_augmented_in_the_graph_are_the_host_batches():
    """Same seed and resume state: cifar_augment of the raw stream gives the host stream's floats bit for bit,
    augmented or not, across an epoch boundary."""
    ds = tfdata.synthetic(40, 8, seed=1)
    g = tf.Graph()
    with g.as_default():
        raw = tf.placeholder(tf.uint8, [None, 3, 32, 32])
        crops = tf.placeholder(tf.int32, [None, 3])
        out = cifar_augment(raw, crops, 1 / (255 * tfdata.STD), tfdata.MEAN / tfdata.STD)
    state = {"seed": 3, "epoch": 1, "batch_index": 3}
    with tf.Session(graph=g) as sess:
        for augment in (True, False):
            with tfdata.train_batches(ds, 8, seed=3, augment=augment, state=state) as host, \
                    tfdata.train_batches(ds, 8, seed=3, augment=augment, state=state, raw=True) as dev:
                for _ in range(4):
                    (x, y), ((images, c), y2) = next(host), next(dev)
                    assert images.dtype == np.uint8 and c.dtype == np.int32 and c.shape == (8, 3)
                    np.testing.assert_array_equal(sess.run(out, {raw: images, crops: c}), x)
                    np.testing.assert_array_equal(y, y2)


@pytest.mark.parametrize("device", ["cpu", "opencl"])
def test_device_input_trains_exactly_like_host_input(device, tmp_path):
    logs = {}
    for where in ("host", "device"):
        logs[where] = tmp_path / f"{where}.jsonl"
        assert main(["train", *SMALL, "--steps", "2", "--device", device, "--input", where,
                     "--log", str(logs[where])]) == 0
    assert _losses(logs["device"]) == _losses(logs["host"])


def test_resume_with_device_input_on_opencl_is_exact(tmp_path, capsys):
    argv = ["train", *SMALL, "--steps", "4", "--device", "opencl", "--checkpoint-every", "2"]
    whole, folder = tmp_path / "whole.jsonl", tmp_path / "ckpt"
    assert main([*argv, "--log", str(whole), "--checkpoint-dir", str(folder)]) == 0
    # As if the run had been stopped after step 2: its later checkpoint gone.
    for p in folder.glob("model.ckpt-4*"):
        p.unlink()
    (folder / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-2"\n'
                                       'all_model_checkpoint_paths: "model.ckpt-2"\n')
    resumed = tmp_path / "resumed.jsonl"
    assert main([*argv, "--checkpoint-dir", str(folder), "--resume", "--log", str(resumed)]) == 0
    assert _losses(resumed) == _losses(whole)[2:]


def test_eval_and_a_memory_budget_with_device_input(tmp_path, capsys):
    ckpt = str(tmp_path / "ckpt")
    # One class: a hundred test images, so that the evaluation on PoCL (unoptimized kernels in tests) is quick.
    assert main(["train", *SMALL, "--classes", "0", "--steps", "4", "--input", "device", "--memory-budget",
                 "1.4MB", "--checkpoint-dir", ckpt, "--log", str(tmp_path / "budget.jsonl")]) == 0
    err = capsys.readouterr().err
    assert "memory plan for --memory-budget" in err and "first step done" in err
    assert main(["train", *SMALL, "--classes", "0", "--steps", "4", "--input", "host",
                 "--log", str(tmp_path / "host.jsonl")]) == 0
    np.testing.assert_allclose(_losses(tmp_path / "budget.jsonl"), _losses(tmp_path / "host.jsonl"), rtol=1e-5)
    capsys.readouterr()
    assert main(["eval", "--checkpoint", ckpt, "--device", "opencl", "--batch-size", "16"]) == 0
    assert "all" in capsys.readouterr().out
