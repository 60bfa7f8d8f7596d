"""kernels/opencl/array.gather and scatter, which pack an all-reduce's bucket of gradients into one buffer for its
copy to the host and unpack the sum copied back (kernels/opencl/collective.py): against NumPy's concatenation, with
more arrays than one launch takes (8), empty ones among them, and 4- and 8-byte elements."""
import numpy as np
import pytest

pytest.importorskip("pyopencl", reason="the opencl device needs pyopencl")

from tfplus.kernels.opencl.array import gather, scatter  # noqa: E402
from tfplus.runtime.opencl.runtime import OpenCLRuntime  # noqa: E402

SHAPES = [(3, 3, 3, 8), (8,), (0,), (5, 7), (1,), (64,), (2, 2), (0, 4), (9,), (300,), (3,)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gather_packs_a_bucket_and_scatter_unpacks_it(dtype):
    rt = OpenCLRuntime()
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(dtype) for s in SHAPES]

    def put(a):  # device-computed memory, as a gradient is
        d = rt.allocate(a.shape, a.dtype)
        rt.upload_into(d, a)
        return d
    packed = put(np.full(sum(a.size for a in arrays), np.nan, dtype))
    gather(rt, packed, [put(a) for a in arrays])
    np.testing.assert_array_equal(rt.copy_out(packed), np.concatenate([a.ravel() for a in arrays]))
    outs = [put(np.full(s, np.nan, dtype)) for s in SHAPES]
    scatter(rt, outs, packed)
    for out, a in zip(outs, arrays):
        np.testing.assert_array_equal(rt.copy_out(out), a)
