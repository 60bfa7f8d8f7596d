"""tfplus.ops.special_math_ops on the opencl device: their NumPy kernels on host copies. None of them is on a
training path of the model zoo; special functions, unique and sorted search are rare and small in TF1 scripts."""
from tfplus.kernels.numpy.special_math import _ELEMENTWISE
from tfplus.kernels.opencl._common import run_on_host
from tfplus.registry import find_kernel, register_kernel

for _t in (*_ELEMENTWISE, "Cumprod", "Unique", "UniqueWithCounts", "UnsortedSegmentMax", "UnsortedSegmentMin",
           "UnsortedSegmentProd", "LowerBound", "UpperBound", "DenseToDenseSetOperation"):
    def _on_host(ctx, ins, outs, attrs, _t=_t):
        run_on_host(ctx, find_kernel(_t, "cpu", ctx.op.inputs[0].dtype), ins, outs, attrs, upload=True)
    register_kernel(_t, "opencl")(_on_host)
