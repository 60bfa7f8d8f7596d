"""If and While on the opencl device: the device-independent kernels of tfplus.kernels.numpy.control_flow
(their sub-graphs' ops run as opencl kernels; only the predicate is read back each iteration)."""
from tfplus.kernels.numpy.control_flow import assert_kernel, if_kernel, while_kernel
from tfplus.registry import register_kernel

register_kernel("If", "opencl")(if_kernel)
register_kernel("While", "opencl")(while_kernel)


@register_kernel("Assert", "opencl")
def _assert(ctx, ins, outs, attrs):
    assert_kernel(ctx, [ctx.runtime.copy_out(a) for a in ins], outs, attrs)  # checked on the host
