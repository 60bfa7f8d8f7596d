"""The opencl device against the cpu (NumPy) device on one small graph: shared by the opencl kernel tests."""
import numpy as np

import tfplus as tf


def run_both(build, arrays, tol=(1e-4, 1e-4)):
    """Builds `build(*placeholders)` (a list of tensors), runs it on cpu and opencl, compares every output:
    float32 within `tol` (rtol, atol times the largest reference value), float64 within 1e-12, the rest equal."""
    g = tf.Graph()
    with g.as_default():
        phs = [tf.placeholder(tf.as_dtype(a.dtype), a.shape) for a in arrays]
        outs = build(*phs)
    feeds = dict(zip(phs, arrays))
    with tf.Session(graph=g) as s:
        want = s.run(outs, feeds)
    with tf.Session(graph=g, device="opencl") as s:
        got = s.run(outs, feeds)
    for k, (a, b) in enumerate(zip(got, want)):
        assert a.shape == b.shape and a.dtype == b.dtype, (k, a.shape, b.shape, a.dtype, b.dtype)
        if b.dtype.kind == "f":
            rtol, atol = tol if b.dtype == np.float32 else (1e-12, 1e-12)
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol * max(1.0, float(np.abs(b).max(initial=0))),
                                       err_msg=f"output {k} ({outs[k].op.type})")
        else:
            np.testing.assert_array_equal(a, b, err_msg=f"output {k} ({outs[k].op.type})")
    return got
