"""Runs sweep scripts one after another in this process, as `python SCRIPT OUT` would run each:

    _run.py DEVICE OUT SCRIPT...

DEVICE "opencl": every session a script makes without naming a device runs on this rank's OpenCL device
(tfplus.distributed.local_device(), what Horovod's visible_device_list = str(local_rank()) picks). A script that
raises leaves OUT/<script>.error with its error, and the job ends there, as that script's own would (the error
that nothing catches aborts every rank): the ranks of a job that went on could wait in different collectives."""
import os
import runpy
import sys
import traceback

import tfplus as tf
from tfplus.engine import session

device, out, scripts = sys.argv[1], sys.argv[2], sys.argv[3:]
if device != "cpu":
    made = session.Session.__init__

    def on_device(self, *args, device="cpu", **kwargs):
        import tfplus.distributed as hvd
        made(self, *args, device=hvd.local_device() if device == "cpu" else device, **kwargs)
    session.Session.__init__ = on_device
for script in scripts:
    tf.reset_default_graph()
    sys.argv = [script, out]
    try:
        runpy.run_path(script, run_name="__main__")
    except Exception:
        name = os.path.splitext(os.path.basename(script))[0]
        with open(os.path.join(out, f"{name}.error"), "a") as f:  # what the test reports
            f.write(traceback.format_exc())
        raise
