"""The random ops with no OpenCL kernel (integer uniforms, gamma, Poisson, the stateless ops) on the opencl device:
their NumPy kernels on the host, which draw the same numbers from the same node's stream as on the cpu."""
from tfplus.kernels.opencl._common import run_on_host
from tfplus.registry import find_kernel, register_kernel

for _t in ("RandomUniformInt", "RandomGamma", "RandomPoissonV2", "StatelessRandomNormal", "StatelessRandomUniform",
           "StatelessTruncatedNormal"):
    def _on_host(ctx, ins, outs, attrs, _t=_t):
        run_on_host(ctx, find_kernel(_t, "cpu", None), ins, outs, attrs, upload=True)
    register_kernel(_t, "opencl")(_on_host)
