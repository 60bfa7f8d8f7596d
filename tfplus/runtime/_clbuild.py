"""OpenCL program sources, their binary cache's file names, and build worker processes.

A GPU driver may build the programs of one process one at a time (NVIDIA's did: 8 threads built the Mentee
step's programs only 1.3x faster than one), but not those of several processes. So a cold start hands its
program list to worker processes, each with its own context, which build their share into the binary cache
that tfplus.runtime.opencl then loads from. A worker is this file run as a script: it imports pyopencl and the
standard library only (not tfplus, whose import would cost it more than a build).
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path


def source(files: tuple[str, ...], kernels) -> str:
    """The program text of `files`, after common.cl, from the folder `kernels` (a Path or a package's
    importlib.resources Traversable)."""
    return "".join(f"// ---- {f}\n{kernels.joinpath(f).read_text()}\n" for f in ("common.cl",) + tuple(files))


def binary_path(cache: Path, src: str, opts: str, device, version_text: str) -> Path:
    """Where the binary of `src` built with `opts` for `device` is cached: a digest of everything that
    changes it."""
    digest = hashlib.sha256("\0".join([src, opts, device.platform.name, device.name, device.version,
                                       device.driver_version, version_text]).encode()).hexdigest()
    return cache / f"{digest}.bin"


def save_binary(prg, path: Path, cl) -> None:
    """Writes `prg`'s binary to `path` atomically (a concurrent reader sees the whole file or none)."""
    try:
        binary = prg.get_info(cl.program_info.BINARIES)[0]
        if binary:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.{id(prg)}.tmp")
            tmp.write_bytes(binary)
            os.replace(tmp, path)
    except (OSError, cl.Error):  # a read-only home or a device that gives no binaries: nothing cached
        pass


def work(job: Path) -> None:
    """Builds every program of `job` (JSON: platform, device, cache, std, extra, programs: [[files], options]),
    each into the binary cache unless it is there; a program that fails is left to the parent, which builds it
    again and reports the build log."""
    import pyopencl as cl
    spec = json.loads(job.read_text())
    job.unlink()
    device = next(d for p in cl.get_platforms() if p.name == spec["platform"]
                  for d in p.get_devices() if d.name == spec["device"])
    ctx = cl.Context([device])
    cache = Path(spec["cache"])
    for files, options in spec["programs"]:
        src = source(tuple(files), Path(spec["kernels"]))
        opts = " ".join(x for x in (spec["std"], options, spec["extra"]) if x)
        path = binary_path(cache, src, opts, device, cl.VERSION_TEXT)
        if path.exists():
            continue
        prg = cl._cl._Program(ctx, src)  # as the parent builds it (not pyopencl's own cache)
        try:
            prg.build(f"{opts} -w".encode(), [device])
        except cl.Error:
            continue
        save_binary(prg, path, cl)


if __name__ == "__main__":
    work(Path(sys.argv[1]))
