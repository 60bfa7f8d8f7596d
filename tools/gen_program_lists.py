"""Regenerates the OpenCL program lists shipped with the package, kernels/opencl/programs-<cpu|gpu>.json: per
model, the programs that `tfplus train --model M --device opencl` builds on a fresh machine, which
tfplus.runtime.opencl.prebuild starts building in the background when no list of this machine's own exists.

    python tools/gen_program_lists.py                       # every model, on the default OpenCL device
    python tools/gen_program_lists.py --device opencl:0 --models mentee lenet

Run it on a machine of the kind the list is for (a GPU for programs-gpu.json: its tile sizes differ from a
CPU's). Each model trains one step on synthetic data with an empty cache and evaluates; the lists are what that
run recorded: the first step's programs ("train-<model>") and those the evaluation added ("eval-<model>", which
`tfplus train` starts building after its first step).

On a GPU, --tuning first tunes every model's GEMM tiles without a time bound and writes them to
kernels/opencl/tuning-gpu.json under the device's name (tfplus.runtime.opencl.shipped_tuning), so that a fresh
machine with that GPU spends no time tuning. The program lists are recorded by the installed package, so
install it editable (`pip install -e .`) for them to use the new tiles, or run the tool again without --tuning.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LISTS = ROOT / "kernels" / "opencl"


def recorded(model: str, device: str) -> dict:
    """The program lists one step of training `model` on `device` and its evaluation record, with an empty cache:
    {"train-<model>": the first step's, "eval-<model>": what the evaluation added (absent when nothing)}. Run
    from the cache folder: from the project's root, `-m tfplus` would import the checkout's tfplus/, not the
    installed package."""
    with tempfile.TemporaryDirectory() as cache:
        cmd = [sys.executable, "-m", "tfplus", "train", "--model", model, "--device", device, "--synthetic",
               "--steps", "1"]
        env = {**os.environ, "XDG_CACHE_HOME": cache, "TFPLUS_OPENCL_PREBUILD": "1"}
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, cwd=cache)
        (path,) = (Path(cache) / "tfplus" / "opencl").glob("programs-*.json")
        lists = json.loads(path.read_text())
        return {name: lists[name] for name in (f"train-{model}", f"eval-{model}") if name in lists}


def tuned(models: list, device: str, name: str, budgets: list, tuning_file: str, start: dict) -> None:
    """Tunes `models`' tiles on `device` (no time bound), without a memory budget and under each of `budgets`
    (their micro-batches and scratch divisors are other problems), and merges them into tuning-gpu.json under
    `name`. The device's tuning file (`tuning_file`, its name in the cache) starts as `start`: the problems in it
    are not tuned again (the shipped tiles, which a GPU also borrows from others, are not read)."""
    with tempfile.TemporaryDirectory() as cache:
        (Path(cache) / "tfplus" / "opencl").mkdir(parents=True)
        (Path(cache) / "tfplus" / "opencl" / tuning_file).write_text(json.dumps(start))
        env = {**os.environ, "XDG_CACHE_HOME": cache, "TFPLUS_OPENCL_TUNE_S": "inf", "TFPLUS_OPENCL_PREBUILD": "0"}
        for model in models:
            for budget in [None, *budgets]:
                # Without a budget, the evaluation's batches too (their own shapes); under one, it evaluates at
                # the training batch, whose shapes the step has.
                more = ["--memory-budget", budget, "--no-eval"] if budget else []
                done = subprocess.run([sys.executable, "-m", "tfplus", "train", "--model", model, "--device",
                                       device, "--synthetic", "--steps", "1", *more], env=env,
                                      stdout=subprocess.DEVNULL, cwd=cache)
                if done.returncode:  # a budget too small for this model: its message is on stderr
                    if budget is None:
                        raise SystemExit(f"training {model} failed")
                    print(f"{model} under {budget}: not tuned", file=sys.stderr)
        (path,) = (Path(cache) / "tfplus" / "opencl").glob("tuning-*.json")
        table = json.loads(path.read_text())
    out = LISTS / "tuning-gpu.json"
    shipped = json.loads(out.read_text()) if out.exists() else {}
    shipped[name] = {**shipped.get(name, {}), **table}
    out.write_text(json.dumps(shipped, indent=0, sort_keys=True) + "\n")
    print(f"wrote {out}: {len(table)} tiles for {name}", file=sys.stderr)


def main() -> None:
    from tfplus.graphs import MODELS
    from tfplus.runtime import get_runtime
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="opencl")
    # tfplus train runs the models of CIFAR's image size only (alexnet and mobilenet224 take ImageNet's)
    trained = sorted(name for name, m in MODELS.items() if m.image_shape == (3, 32, 32))
    p.add_argument("--models", nargs="+", default=trained, choices=trained)
    p.add_argument("--tuning", action="store_true", help="also ship this GPU's tuned tiles (tuning-gpu.json)")
    p.add_argument("--retune", action="store_true", help="with --tuning, tune again the problems already shipped")
    p.add_argument("--budgets", nargs="*", default=["64MB", "32MB", "24MB", "16MB"],
                   help="with --tuning, also tune the steps planned for these memory budgets")
    args = p.parse_args()
    dev = get_runtime(args.device).dev
    kind = "gpu" if dev.is_gpu else "cpu"
    if args.tuning and dev.is_gpu:
        # The tiles the package ships for this GPU's own name, not those it borrows from another (shipped_tuning):
        # those are tuned afresh, as everything with --retune.
        shipped = LISTS / "tuning-gpu.json"
        own = {} if args.retune or not shipped.exists() else json.loads(shipped.read_text()).get(dev.device.name, {})
        tuned(args.models, args.device, dev.device.name, args.budgets, dev.tuning_path.name, own)
    out = LISTS / f"programs-{kind}.json"
    lists = json.loads(out.read_text()) if out.exists() else {}
    for model in args.models:
        made = recorded(model, args.device)
        lists.pop(f"eval-{model}", None)
        lists.update(made)
        print(f"{model}: {len(made[f'train-{model}'])} programs, evaluation {len(made.get(f'eval-{model}', []))} "
              "more", file=sys.stderr)
    out.write_text(json.dumps(lists, indent=0, sort_keys=True) + "\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
