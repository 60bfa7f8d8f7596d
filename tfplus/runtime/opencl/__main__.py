"""A child process that builds OpenCL programs into tfplus's disk cache for its parent (build.Builder).

    python -m tfplus.runtime.opencl INDEX

INDEX is the device's entry in list_devices(). The child makes its own context, says "ready" (or exits if it
cannot), then for each line [files, options] on stdin builds that program from source into the cache and answers
"ok" (its binary is there) or "fail"; it ends when stdin ends. Compiler output and errors stay here: the parent
builds a failed program itself, which reports the build log."""
import json
import sys

from tfplus.runtime.opencl.build import program_source
from tfplus.runtime.opencl.device import Device
from tfplus.runtime.opencl.discovery import select


def main() -> None:
    try:
        dev = Device.get(select(sys.argv[1]))
    except Exception:  # noqa: BLE001  no device, no context: the parent builds on its own threads
        return
    print("ready", flush=True)
    for line in sys.stdin:
        files, options = json.loads(line)
        try:
            dev._build(tuple(files), options, background=True)
            ok = program_source(dev.device, tuple(files), options)[2].exists()
        except Exception:  # noqa: BLE001  see the module's docstring
            ok = False
        print("ok" if ok else "fail", flush=True)


if __name__ == "__main__":
    main()
