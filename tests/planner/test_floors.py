"""The issue's feasibility bars that the planner reaches (issue 34, BENCHMARKS.md "Lower floors"), through `tfplus
plan`: Mentee's training step at batch 128 fits 12 MB on the cpu (its micro-batches' gradients written into their
accumulators), and LeNet's at batch 1024 fits 8 MB with the dataset's bytes fed (`--input device`)."""
from __future__ import annotations

import json

from tfplus.cli import main


def _plan(capsys, *argv) -> dict:
    status = main(["plan", *argv, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert status == (0 if out["fits"] else 1)
    return out


def test_mentee_fits_12mb_on_the_cpu():
    """The plan `tfplus plan --model mentee --memory-budget 12MB` finds (128 micro-batches of one image, gradients
    accumulated where they are made), built directly: the search over every combination takes ~15 s."""
    from argparse import Namespace

    from tfplus import planner
    from tfplus.plan_cli import _TrainStep
    from tfplus.runtime.facts import device_facts
    step = _TrainStep(Namespace(model="mentee", optimizer="momentum", data_format="NCHW", device="cpu"))
    facts, shapes = device_facts("cpu"), step.shapes(128)
    plain, accumulated = (planner.plan(step.planned, shapes, facts, graph=step.graph, force=(128, 1) + extra)
                          for extra in ((), (False, 1, 0, None, True)))
    assert accumulated.peak_bytes <= 12_000_000 < plain.peak_bytes
    assert "accumulate" in {t["name"] for t in accumulated.transformations}


def test_lenet_batch_1024_fits_8mb_with_bytes_fed(capsys):
    floats = _plan(capsys, "--model", "lenet", "--batch-size", "1024", "--memory-budget", "8MB")
    assert not floats["fits"] and floats["breakdown"]["feeds"] > 8_000_000  # 12.6 MB of float32 images fed
    data = _plan(capsys, "--model", "lenet", "--batch-size", "1024", "--memory-budget", "8MB", "--input", "device")
    assert data["fits"] and data["breakdown"]["feeds"] < floats["breakdown"]["feeds"] / 3
