"""A child process that builds OpenCL programs into tfplus's disk cache for its parent (build.Builder).

    python -m tfplus.runtime.opencl SELECTOR

SELECTOR chooses the device as "opencl:SELECTOR" does (an index of list_devices(), text in a name; "": the
default). The child makes its own context, says "ready INDEX TIME" (the device's index, and the wall-clock time,
for the parent's TFPLUS_DEBUG line) or exits if it cannot, then for each line [files, options] on stdin builds that
program from source into the cache and answers "ok" (its binary is there) or "fail"; it ends when stdin ends.
Compiler output and errors stay here: the parent builds a failed program itself, which reports the build log."""
import json
import sys
import time

from tfplus.runtime.opencl.build import program_source
from tfplus.runtime.opencl.device import Device
from tfplus.runtime.opencl.discovery import cl_devices, select


def main() -> None:
    try:
        d = select(sys.argv[1] or None)
        index = [x.int_ptr for x in cl_devices()].index(d.int_ptr)
        dev = Device.get(d)
    except Exception:  # noqa: BLE001  no device, no context: the parent builds on its own threads
        return
    print(f"ready {index} {time.time():.3f}", flush=True)
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
