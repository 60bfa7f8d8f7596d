"""The GEMM tiles the package ships (kernels/opencl/tuning-gpu.json) as a GPU reads them: its own, and per
problem, those of its vendor's nearest-named GPU that has one (tfplus.runtime.opencl.parse_tuning)."""
from __future__ import annotations

import importlib.resources
import json

from tfplus.runtime.opencl import parse_tuning, shipped_tuning

H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"


def test_a_gpu_borrows_per_problem_the_tiles_it_has_none_for():
    """An H200 with a few tiles of its own keeps borrowing the H100's others; the H100 borrows the H200's for
    problems it has none for; each keeps its own where both have one; the nearest name lends first."""
    h100 = {"a|": [64, 64, 16, 4, 4], "b|": [32, 64, 16, 2, 4], "c|": [128, 64, 16, 8, 4]}
    h200 = {"c|": [32, 128, 16, 4, 8], "d|": [32, 32, 16, 4, 4]}
    a100 = {"a|": [16, 16, 16, 2, 2], "e|": [64, 32, 16, 4, 2]}
    text = json.dumps({H100: h100, H200: h200, "NVIDIA A100-SXM4-80GB": a100, "AMD Radeon RX 7900 XTX": {"f|": [1]}})
    assert parse_tuning(text, H200) == ({**a100, **h100, **h200}, H200)
    assert parse_tuning(text, H100) == ({**a100, **h200, **h100}, H100)
    # no tiles of its own: it starts from the nearest name's, and takes the others' for the rest
    assert parse_tuning(text, "NVIDIA H100 PCIe") == ({**a100, **h200, **h100}, H100)
    assert parse_tuning(text, "Intel(R) Arc(TM) A770 Graphics") == ({}, None)
    # a lender whose entry is not tiles lends nothing; the device's own entry not tiles: nothing at all
    bad = json.dumps({H100: h100, H200: {"c|": "x"}})
    assert parse_tuning(bad, H100) == (h100, H100) and parse_tuning(bad, H200) == ({}, None)


def test_the_shipped_table_serves_both_gpus_every_problem_either_was_tuned_for():
    """tuning-gpu.json: the H200 has its tiles of the 3x3 conv kernels with vector tiles, of the halo kernels (with
    channel groups too) and of conv3_wgrad_tile (tuned there), the H100 everything else; each reads the union, its
    own tile first."""
    text = importlib.resources.files("tfplus.kernels.opencl").joinpath("tuning-gpu.json").read_text()
    table = json.loads(text)
    own200, own100 = table[H200], table[H100]
    assert own200 and all(k.split("|")[0] in ("conv3_fwdv", "conv3_dxv", "conv3_dwv", "conv3_fwdh", "conv3_dxh",
                                              "conv3_dwh", "conv3_fwdhk", "conv3_dxhk", "conv3_dwt") for k in own200)
    for name in (H200, H100):
        tiles, got = shipped_tuning(name)
        assert got == name and set(tiles) == set(own200) | set(own100)
        own = table[name]
        assert all(tiles[k] == own[k] for k in own)
