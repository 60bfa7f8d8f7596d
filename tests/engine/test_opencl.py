"""The opencl device against the cpu (NumPy) device: every OpenCL kernel family on awkward shapes, a whole
Mentee training step, what stays on the device, fallback, and the runtime itself (selection, program caches).

Runs on PoCL in CI. float32 tolerance: rtol 1e-4 and atol 1e-4 * max|reference| for the GEMM-based kernels
(convolutions, matmul: sums of up to a few hundred products in a different order), 1e-5 elsewhere; float64
kernels agree to 1e-12 relative. The op table (test_op_table.py) also runs every table case on opencl.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from conftest import needs_opencl
from opencl_compare import run_both

import tfplus as tf
import tfplus.train  # noqa: F401  (tf.train)
from tfplus.engine.executor import Draw
from tfplus.runtime import opencl

pytestmark = needs_opencl


def _rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# -- runtime -------------------------------------------------------------------------------------------------
def test_list_devices_describes_each_device():
    devices = opencl.list_devices()
    assert devices
    for d in devices:
        assert {"index", "platform", "name", "type", "global_mem_bytes", "compute_units",
                "max_work_group_size", "local_mem_bytes", "fp16", "opencl_version",
                "driver_version"} <= set(d)
        assert d["global_mem_bytes"] > 0 and d["compute_units"] > 0


def test_device_selection_by_index_name_and_env(monkeypatch):
    first = opencl.list_devices()[0]
    assert opencl.OpenCLRuntime("0").info["name"] == first["name"]
    assert opencl.OpenCLRuntime(first["name"][:6].lower()).info["name"] == first["name"]
    monkeypatch.setenv("TFPLUS_OPENCL_DEVICE", first["platform"][:8])
    assert opencl.OpenCLRuntime().info["platform"] == first["platform"]
    with pytest.raises(ValueError, match="no OpenCL device matches"):
        opencl.OpenCLRuntime("no-such-device")
    with pytest.raises(ValueError, match="does not exist"):
        opencl.OpenCLRuntime("99")


def test_build_failure_names_the_file_and_shows_the_log():
    rt = opencl.OpenCLRuntime()
    with pytest.raises(RuntimeError, match=r"elementwise\.cl.*failed") as e:
        rt.kernel("elementwise.cl", "relu_f32", "-DT=no_such_type -DSFX=f32 -DIS_FLOAT=1 -DWANT_relu=1")
    assert "no_such_type" in str(e.value)  # the compiler's log


def test_programs_are_cached_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    rt = opencl.OpenCLRuntime()
    files, opts = ("elementwise.cl",), "-DT=float -DSFX=f32 -DIS_FLOAT=1 -DIS_SIGNED=1 -DWANT_neg=1"
    rt.dev._build(files, opts)
    cached = list((tmp_path / "tfplus" / "opencl").glob("*.bin"))
    assert len(cached) == 1
    prg = rt.dev._build(files, opts)  # from the binary this time
    assert [k.function_name for k in prg.all_kernels()] == ["neg_f32"]


# -- kernels vs NumPy ----------------------------------------------------------------------------------------
# (n, h, w, cin, cout, kernel size); a reduction of at most conv.SMALL_K taps (the last three) runs conv_small,
# the third in two groups of output channels, the second partly filled.
CONV_SHAPES = [(2, 9, 7, 5, 6, 3), (3, 12, 12, 19, 37, 3), (2, 8, 7, 3, 40, 3), (4, 12, 12, 1, 8, 3),
               (2, 6, 5, 4, 3, 1)]


@pytest.mark.parametrize("fmt,stride,padding",
                         list(itertools.product(["NCHW", "NHWC"], [1, 2], ["SAME", "VALID"])))
def test_conv2d_and_both_backprops(fmt, stride, padding):
    rng = np.random.default_rng(stride * 10 + len(padding))
    for n, h, w, c, k, ks in CONV_SHAPES:
        x = _rand(rng, *((n, c, h, w) if fmt == "NCHW" else (n, h, w, c)))
        f = _rand(rng, ks, ks, c, k)

        def build(x, f):
            y = tf.nn.conv2d(x, f, strides=stride, padding=padding, data_format=fmt)
            dy = tf.constant(rng.standard_normal(y.shape.as_list()).astype(np.float32))
            return [y, *tf.gradients(y, [x, f], grad_ys=dy)]
        run_both(build, [x, f])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_small_convs_split_their_sum_and_finish_it_in_the_kernel(monkeypatch, dtype):
    """An output of fewer tiles than compute units splits its sum over work-group layers (conv.py `_splits`),
    forward (with the fused bias and ReLU) and input gradient, strided or not: same values as NumPy. The device
    is made to look wide, so that these small shapes split on any machine."""
    from tfplus.kernels.opencl import conv
    split, run, layers = conv._splits, conv._run_conv, []
    monkeypatch.setattr(conv, "_splits", lambda m, n, k, cu: split(m, n, k, 48))
    monkeypatch.setattr(conv, "_run_conv", lambda rt, plan, *a: layers.append(plan[5]) or run(rt, plan, *a))
    rng = np.random.default_rng(5)
    for stride in (1, 2):
        x, f, b = _rand(rng, 2, 64, 5, 5, dtype=dtype), _rand(rng, 3, 3, 64, 48, dtype=dtype), _rand(rng, 48)

        def build(x, f, stride=stride, b=b):
            y = tf.nn.conv2d(x, f, strides=stride, padding="SAME", data_format="NCHW")
            z = tf.nn.relu(tf.nn.bias_add(y, tf.constant(b.astype(dtype)), data_format="NCHW"))
            dy = tf.constant(rng.standard_normal(y.shape.as_list()).astype(dtype))
            return [y, z, *tf.gradients(y, [x], grad_ys=dy)]
        run_both(build, [x, f])
    assert sorted(set(layers)) == [3, 4]  # forward 4 (fused or not), input gradients (strided or not) 3


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("finish", [True, False])
def test_filter_gradients_finish_their_split_sums_in_the_kernel_or_in_a_pass(monkeypatch, dtype, finish):
    """A filter gradient splits its long sum over work-group layers; the last layer of each tile adds them up
    (conv.py WGRAD_FINISH_LOADS) or a second pass does: same values as NumPy either way, strided or not."""
    from tfplus.kernels.opencl import conv
    split, run, plans = conv._wgrad_splits, conv._run_wgrad, []
    monkeypatch.setattr(conv, "_wgrad_splits", lambda m, n, p, cu, d=1: split(m, n, p, 48, d))
    monkeypatch.setattr(conv, "WGRAD_FINISH_LOADS", 10 ** 6 if finish else 0)
    monkeypatch.setattr(conv, "_run_wgrad", lambda rt, plan, *a: plans.append(plan[5:]) or run(rt, plan, *a))
    rng = np.random.default_rng(6)
    for stride in (1, 2):
        x, f = _rand(rng, 8, 8, 16, 16, dtype=dtype), _rand(rng, 3, 3, 8, 6, dtype=dtype)

        def build(x, f, stride=stride):
            y = tf.nn.conv2d(x, f, strides=stride, padding="SAME", data_format="NCHW")
            dy = tf.constant(rng.standard_normal(y.shape.as_list()).astype(dtype))
            return tf.gradients(y, [f], grad_ys=dy)
        run_both(build, [x, f])
    assert plans and all(splits > 1 and done == finish for splits, done in plans), plans


def test_conv2d_float64():
    rng = np.random.default_rng(1)
    for cin in (4, 3):  # the GEMM, conv_small
        x, f = _rand(rng, 2, cin, 7, 6, dtype=np.float64), _rand(rng, 3, 3, cin, 5, dtype=np.float64)
        run_both(lambda x, f: [tf.nn.conv2d(x, f, strides=1, padding="SAME", data_format="NCHW")], [x, f])


@pytest.mark.parametrize("ta,tb", list(itertools.product([False, True], repeat=2)))
def test_matmul_odd_sizes_and_transposes(ta, tb):
    rng = np.random.default_rng(int(ta) * 2 + int(tb))
    for m, k, n in [(37, 70, 45), (3, 600, 4)]:  # the second splits K over work-group layers
        a = _rand(rng, *((k, m) if ta else (m, k)))
        b = _rand(rng, *((n, k) if tb else (k, n)))
        run_both(lambda a, b: [tf.matmul(a, b, transpose_a=ta, transpose_b=tb)], [a, b])


@pytest.mark.parametrize("activation", ["", "Relu", "Relu6"])
def test_fused_matmul_adds_bias_and_activation_after_a_second_pass_too(monkeypatch, activation):
    """Split K layers added up by a second pass (a device that does not finish them in the kernel): the bias and
    activation then come in a launch of their own."""
    from tfplus.framework import apply_op
    from tfplus.kernels.opencl import matmul, reduce
    monkeypatch.setattr(reduce, "finishes_splits", lambda rt: False)
    epilogues, epilogue = [], matmul._epilogue
    monkeypatch.setattr(matmul, "_epilogue", lambda *args: epilogues.append(epilogue(*args)))
    rng = np.random.default_rng(3)
    a, b, bias = _rand(rng, 3, 777), _rand(rng, 777, 5), _rand(rng, 5)
    attrs = {"transpose_a": False, "transpose_b": False, "activation": activation}
    run_both(lambda a, b, bias: [apply_op("_FusedMatMul", [a, b, bias], attrs, "fused")], [a, b, bias])
    assert len(epilogues) == 1


def test_matmul_int32():
    rng = np.random.default_rng(2)
    a, b = rng.integers(-9, 9, (13, 17)).astype(np.int32), rng.integers(-9, 9, (17, 5)).astype(np.int32)
    run_both(lambda a, b: [tf.matmul(a, b)], [a, b])


@pytest.mark.parametrize("fmt,pool,window,padding", list(itertools.product(
    ["NCHW", "NHWC"], ["max", "avg"], [(2, 2), (3, 2)], ["SAME", "VALID"])))
def test_pooling_and_gradients(fmt, pool, window, padding):
    rng = np.random.default_rng(3)
    shape = (2, 3, 7, 8) if fmt == "NCHW" else (2, 7, 8, 3)
    x = rng.permutation(np.arange(np.prod(shape))).reshape(shape).astype(np.float32)  # distinct: no ties
    k, s = window
    ksize = [1, 1, k, k] if fmt == "NCHW" else [1, k, k, 1]
    strides = [1, 1, s, s] if fmt == "NCHW" else [1, s, s, 1]
    fn = tf.nn.max_pool if pool == "max" else tf.nn.avg_pool

    def build(x):
        y = fn(x, ksize, strides, padding, data_format=fmt)
        dy = tf.constant(rng.standard_normal(y.shape.as_list()).astype(np.float32))
        (dx,) = tf.gradients(y, [x], grad_ys=dy)
        outs = [y, dx]
        if pool == "max":  # MaxPoolGradGrad: the gradient of MaxPoolGrad with respect to its grad input
            outs += tf.gradients(dx, [dy], grad_ys=tf.constant(rng.standard_normal(shape).astype(np.float32)))
        return outs
    run_both(build, [x])


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_bias_add_and_its_gradient(fmt):
    rng = np.random.default_rng(4)
    x, b = _rand(rng, *((3, 5, 4, 6) if fmt == "NCHW" else (3, 4, 6, 5))), _rand(rng, 5)
    run_both(lambda x, b: [tf.nn.bias_add(x, b, data_format=fmt),
                            *tf.gradients(tf.nn.bias_add(x, b, data_format=fmt), [b],
                                          grad_ys=tf.constant(_rand(rng, *x.shape.as_list())))], [x, b])


class _KernelContext:
    """What the compact-state kernel variants see: the runtime (opencl) and scratch (the NumPy ones)."""

    def __init__(self, runtime=None):
        self.runtime = runtime

    def workspace(self, shape, dtype):
        return np.empty(shape, np.dtype(getattr(dtype, "np", dtype)))


def _nan(dtype, n: int) -> np.ndarray:
    """n quiet NaNs of `dtype` with payloads 1..n."""
    quiet = 0x7FC00000 if dtype == np.float32 else 0x7FF8000000000000
    return (quiet + np.arange(1, n + 1)).astype(f"u{np.dtype(dtype).itemsize}").view(dtype)


def _bits(a):
    return a.view(f"u{a.itemsize}")  # compares -0. with 0. and NaN payloads too


@pytest.mark.parametrize("fmt,dtype", list(itertools.product(["NCHW", "NHWC"], [np.float32, np.float64])))
def test_compact_state_variants_match_numpy_bit_for_bit(fmt, dtype):
    from tfplus.kernels.numpy import nn as np_nn
    from tfplus.kernels.opencl import nn as cl_nn
    rng = np.random.default_rng(7)
    shape = (3, 4, 6, 10) if fmt == "NCHW" else (3, 6, 10, 4)
    # Small integers: many ties; image 0 as after a ReLU (all-zero windows); signed zeros; NaNs with payloads.
    x = rng.integers(-2, 3, shape).astype(dtype)
    x[0] = np.maximum(x[0], 0)
    x[(x == 0) & (rng.random(shape) < 0.5)] = -0.0
    x.reshape(-1)[rng.choice(x.size, 5, replace=False)] = _nan(dtype, 5)
    # Windows whose y depends on the order of the maxima (tie: the later operand; of two NaNs the first).
    xv = x if fmt == "NCHW" else x.transpose(0, 3, 1, 2)
    xv[1, 0, 0:2, 0:2] = [[-1, 0.0], [-0.0, -1]]
    xv[1, 0, 0:2, 2:4] = [[-1, _nan(dtype, 1)[0]], [_nan(dtype, 2)[0], -1]]
    attrs = {"ksize": [1, 1, 2, 2] if fmt == "NCHW" else [1, 2, 2, 1],
             "strides": [1, 1, 2, 2] if fmt == "NCHW" else [1, 2, 2, 1], "padding": "VALID", "data_format": fmt}
    y_shape = (3, 4, 3, 5) if fmt == "NCHW" else (3, 3, 5, 4)
    g = np.where(rng.random(y_shape) < 0.5, rng.integers(-2, 3, y_shape), rng.standard_normal(y_shape))
    g = g.astype(dtype)  # negative g: -0. off the argmax (g * 0)

    y, a, dx = np.empty(y_shape, dtype), np.empty(y_shape, np.uint8), np.empty(shape, dtype)
    np_nn.max_pool_saving_argmax(_KernelContext(), [x], [y], attrs, a)
    np_nn.max_pool_grad_relu_from_argmax(_KernelContext(), [x, y, g], [dx], attrs, a)
    assert set(np.unique(a)) == {0, 1, 2, 3} and (y > 0).any() and (y <= 0).any()  # the test's inputs cover all

    rt = opencl.OpenCLRuntime()
    ctx = _KernelContext(rt)
    d_y, d_a, d_dx = rt.allocate(y_shape, dtype), rt.allocate(y_shape, np.uint8), rt.allocate(shape, dtype)
    rt.upload_into(d_dx, np.full(shape, 7, dtype))  # every dx element must be written
    d_x = rt.copy_in(x)
    cl_nn.max_pool_saving_argmax(ctx, [d_x], [d_y], attrs, d_a)
    cl_nn.max_pool_grad_relu_from_argmax(ctx, [d_x, d_y, rt.copy_in(g)], [d_dx], attrs, d_a)
    np.testing.assert_array_equal(rt.copy_out(d_a), a)
    np.testing.assert_array_equal(_bits(rt.copy_out(d_y)), _bits(y))
    np.testing.assert_array_equal(_bits(rt.copy_out(d_dx)), _bits(dx))

    # The pooled ReLU gradient (planner.compact.pooled): the same dx from y, g and the argmax, and the bias
    # gradient of the two launches it replaces, bit for bit.
    from tfplus.kernels.opencl import fused as cl_fused
    ctx.workspace = lambda shape, dt: rt.allocate(shape, getattr(dt, "np", dt))
    bias_attrs = {"data_format": fmt, "activation": "Relu"}
    want_dx, want_db = rt.allocate(shape, dtype), rt.allocate((shape[1 if fmt == "NCHW" else 3],), dtype)
    cl_fused.fused_relu_grad_applied(ctx, [d_dx, d_x], [want_dx, want_db], bias_attrs)
    got_dx, got_db = rt.allocate(shape, dtype), rt.allocate(want_db.shape, dtype)
    rt.upload_into(got_dx, np.full(shape, 7, dtype))
    cl_fused.fused_relu_grad_pooled(ctx, [d_dx, d_x], [got_dx, got_db], bias_attrs, d_y, rt.copy_in(g), d_a)
    np.testing.assert_array_equal(_bits(rt.copy_out(got_dx)), _bits(dx))
    np.testing.assert_array_equal(_bits(rt.copy_out(got_db)), _bits(rt.copy_out(want_db)))


def test_relu_grad_applied_copies_unless_written_in_place(monkeypatch):
    from tfplus.kernels.opencl import nn as cl_nn
    rt = opencl.OpenCLRuntime()
    ctx, g = _KernelContext(rt), _rand(np.random.default_rng(8), 2, 3, 4)
    src, dst = rt.copy_in(g), rt.allocate(g.shape, g.dtype)
    cl_nn.relu_grad_applied(ctx, [src], [dst], {})
    np.testing.assert_array_equal(rt.copy_out(dst), g)
    # A plan writing over its input gives the output its own view of the input's arena slot.
    arena = rt.allocate_arena(4 * rt.arena_alignment)
    a, b = (rt.sub_buffer(arena, 0, g.shape, g.dtype) for _ in range(2))
    other = rt.sub_buffer(arena, 2 * rt.arena_alignment, g.shape, g.dtype)
    assert rt.same_memory(a, b) and rt.same_memory(src, rt.view(src, src.shape))
    assert not rt.same_memory(a, other) and not rt.same_memory(src, dst)
    rt.upload_into(a, g)
    copies = []
    real = opencl.cl.enqueue_copy
    monkeypatch.setattr(opencl.cl, "enqueue_copy", lambda *args, **kw: copies.append(args) or real(*args, **kw))
    for x, y in ((a, b), (src, rt.view(src, src.shape))):
        cl_nn.relu_grad_applied(ctx, [x], [y], {})
    assert not copies
    cl_nn.relu_grad_applied(ctx, [a], [other], {})
    assert len(copies) == 1
    np.testing.assert_array_equal(rt.copy_out(other), g)


class _Guarded:
    """One arena for a kernel test: each tensor is a view at a nonzero offset with guard bytes (a known pattern)
    on both sides; `mirror` is what the arena must hold outside the tensors the kernels may write."""

    GUARD = 0xA5

    def __init__(self, rt, nbytes: int):
        self.rt, self.cursor, self.written = rt, rt.arena_alignment, []
        self.arena = rt.allocate_arena(nbytes)
        self.mirror = np.full(nbytes, self.GUARD, np.uint8)
        rt.upload_into(self.arena, self.mirror)

    def view(self, shape, dtype, value=None):
        """A view after a guard of one alignment unit (so at an aligned nonzero offset), holding `value`."""
        dt = np.dtype(getattr(dtype, "np", dtype))
        at = self.cursor
        v = self.rt.sub_buffer(self.arena, at, shape, dt)
        n = v.nbytes
        self.cursor = (-(-(at + n) // self.rt.arena_alignment) + 1) * self.rt.arena_alignment
        if value is None:
            self.written.append((at, n))
        else:
            value = np.asarray(value, dt).reshape(shape)
            self.rt.upload_into(v, value)
            self.mirror[at:at + n] = value.reshape(-1).view(np.uint8)
        return v

    def check(self) -> None:
        """Inputs and guards hold what they held: the kernels wrote inside their outputs only."""
        got, want = self.rt.copy_out(self.arena), self.mirror.copy()
        for at, n in self.written:
            got[at:at + n] = want[at:at + n]
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, f"{bad.size} bytes outside the outputs changed, the first at arena byte {bad[0]}"


def test_kernels_on_views_at_offsets_match_numpy_and_write_nothing_else():
    """Every kernel family runs on tensors at nonzero offsets of one buffer (planned arena views, and a row view
    at an offset of a row's 12 bytes): results equal the cpu kernels', and no byte around an output or of an
    input changes."""
    from tfplus.registry import find_kernel
    rt = opencl.OpenCLRuntime()
    rng = np.random.default_rng(11)
    x, w, dy = _rand(rng, 2, 6, 6, 3), _rand(rng, 3, 3, 3, 4), _rand(rng, 2, 6, 6, 4)
    rows, logits, labels = _rand(rng, 5, 3), _rand(rng, 4, 7), rng.integers(0, 7, 4).astype(np.int32)
    var, delta = _rand(rng, 3, 4), _rand(rng, 3, 4)
    ROWS = None  # stands for the row view rows[1:4] of a slot holding `rows`
    g = tf.Graph()
    with g.as_default():
        def ph(a):
            return tf.placeholder(tf.as_dtype(a.dtype), a.shape)
        conv = tf.nn.conv2d(ph(x), ph(w), [1, 1, 1, 1], "SAME")
        tf.train.GradientDescentOptimizer(0.5).apply_gradients([(ph(delta), tf.Variable(var))])
        cases = [  # (op, inputs)
            (tf.add(ph(rows[:3]), ph(rows[0])).op, [ROWS, rows[0]]),                 # elementwise.cl
            (tf.nn.relu(ph(rows[:3])).op, [ROWS]),
            (tf.matmul(ph(rows[:3]), ph(w[0, 0])).op, [ROWS, w[0, 0]]),              # matmul.cl
            (conv.op, [x, w]),                                                       # conv.cl
            (tf.nn.conv2d_backprop_filter(ph(x), w.shape, ph(dy), [1, 1, 1, 1], "SAME").op,
             [x, np.array(w.shape, np.int32), dy]),
            (tf.nn.bias_add(ph(dy), ph(w[0, 0, 0])).op, [dy, w[0, 0, 0]]),           # nn.cl
            (tf.nn.max_pool(ph(x), [1, 2, 2, 1], [1, 2, 2, 1], "VALID").op, [x]),
            (tf.nn.sparse_softmax_cross_entropy_with_logits(logits=ph(logits), labels=ph(labels)).op,
             [logits, labels]),
            (tf.reduce_sum(ph(x), [1, 2]).op, [x, np.array([1, 2], np.int32)]),      # reduce.cl
            (tf.argmax(ph(rows[:3]), 1).op, [ROWS, np.array(1, np.int32)]),
            (tf.transpose(ph(x), [0, 3, 1, 2]).op, [x, np.array([0, 3, 1, 2], np.int32)]),  # array.cl
            (tf.random_uniform([3, 5], seed=1).op, [np.array([3, 5], np.int32)]),    # random.cl
            (next(o for o in g.get_operations() if o.type == "ApplyGradientDescent"),
             [var, np.array(0.5, np.float32), delta]),                               # training.cl (in place)
        ]

    class Ctx(_KernelContext):
        def __init__(self, runtime, op, workspace):
            super().__init__(runtime)
            self.op, self.node_name, self.workspace = op, op.name, workspace

        def random_stream(self, size):
            return (1, 2), 0, 0

        def random_draw(self, size):
            return Draw((1, 2), 0, 0, lambda: 0, True)
    for op, ins in cases:
        arena = _Guarded(rt, 1 << 16)
        whole = arena.view(rows.shape, rows.dtype, rows)
        d_ins = [whole[1:4] if a is ROWS else arena.view(np.shape(a), np.asarray(a).dtype, a) for a in ins]
        h_ins = [rows[1:4].copy() if a is ROWS else np.array(a) for a in ins]
        shapes = [tuple(t.shape.as_list()) for t in op.outputs]
        in_place = op.op_def.aliases  # output k is input aliases[k], updated in place
        d_outs = [d_ins[in_place[k]] if k in in_place else arena.view(sh, t.dtype, None)
                  for k, (sh, t) in enumerate(zip(shapes, op.outputs))]
        h_outs = [h_ins[in_place[k]] if k in in_place else np.empty(sh, t.dtype.np)
                  for k, (sh, t) in enumerate(zip(shapes, op.outputs))]
        for k in in_place.values():
            arena.written.append((d_ins[k].block.offset, d_ins[k].nbytes))
        dtype = op.attrs.get("T", op.outputs[0].dtype)
        find_kernel(op.type, "opencl", dtype)(Ctx(rt, op, arena.view), d_ins, d_outs, op.attrs)
        find_kernel(op.type, "cpu", dtype)(Ctx(None, op, _KernelContext().workspace), h_ins, h_outs, op.attrs)
        for d, h in zip(d_outs, h_outs):
            np.testing.assert_allclose(rt.copy_out(d), h, rtol=1e-5, atol=1e-5, err_msg=op.type)
        arena.check()


def test_row_views_copies_and_host_transfers_use_the_offset():
    """a[i:j] is a view (views of views add offsets); copy_rows, copy, copy_in/out and upload_into move
    exactly the viewed bytes."""
    rt = opencl.OpenCLRuntime()
    a = np.arange(24, dtype=np.float32).reshape(6, 4)
    arena = _Guarded(rt, 4096)
    src, dst = arena.view(a.shape, a.dtype, a), arena.view(a.shape, a.dtype, np.zeros_like(a))
    arena.written.append((dst.block.offset, dst.nbytes))
    np.testing.assert_array_equal(rt.copy_out(src[1:5][2:]), a[3:5])
    rt.copy_rows(dst, 4, src, 1, 2)
    rt.copy(dst[0:1], src[5:])
    rt.upload_into(dst[2:3], np.full((1, 4), -1, np.float32))
    want = np.zeros_like(a)
    want[4:6], want[0], want[2] = a[1:3], a[5], -1
    np.testing.assert_array_equal(rt.copy_out(dst), want)
    arena.check()
    with pytest.raises(ValueError, match="step 1"):
        src[::2]
    with pytest.raises(TypeError, match="slice of its rows"):
        src[0]


def test_batches_go_up_through_pinned_staging_buffers_and_arrive_whole():
    """Fed arrays of a batch's size go up without waiting through a ring of pinned buffers: more uploads than the
    ring holds arrive intact, whatever the caller does to its array afterwards, and keep no host copy."""
    rt = opencl.OpenCLRuntime()
    rng = np.random.default_rng(0)
    n = opencl.runtime._STAGED_BYTES // 4 + 3  # float32 elements: just over the threshold, not a size class's size
    sent, bufs = [], []
    for _ in range(2 * opencl.runtime._STAGING_RING + 1):
        x = rng.standard_normal(n).astype(np.float32)
        sent.append(x.copy())
        bufs.append(rt.copy_in(x))
        x[:] = np.nan  # the caller refills its array at once
    assert bufs[0].host is None and rt.dev.staging
    for want, b in zip(sent, bufs):
        np.testing.assert_array_equal(rt.copy_out(b), want)
    small = rt.copy_in(np.arange(8, dtype=np.int32))
    assert small.host is not None  # small feeds keep theirs (shape functions read them)


def test_accumulate_of_many_tensors_is_copy_add_and_scale_bit_for_bit():
    """Micro-batching's merge, eight tensors a launch (runtime.accumulate), gives what copy, add_into and scale
    give one tensor at a time, also with the add and the scale in one pass; more tensors than a launch takes,
    two dtypes, an empty one."""
    rt = opencl.OpenCLRuntime()
    rng = np.random.default_rng(0)
    shapes = [(3, 5), (7,), (0,), (2, 2, 3), (1,), (33,), (4, 4), (9,), (5, 1), (2,), (300,)]
    dtypes = [np.float32] * 8 + [np.float64] * 3 if rt.info["fp64"] else [np.float32] * len(shapes)
    xs = [rng.standard_normal(sh).astype(dt) for sh, dt in zip(shapes, dtypes)]
    ys = [rng.standard_normal(sh).astype(dt) for sh, dt in zip(shapes, dtypes)]
    one = [rt.allocate(x.shape, x.dtype) for x in xs]  # device-written (a fed value keeps its host copy)
    many = [rt.allocate(x.shape, x.dtype) for x in xs]
    dx, dy = [rt.copy_in(x) for x in xs], [rt.copy_in(y) for y in ys]
    for acc, x, y in zip(one, dx, dy):
        rt.copy(acc, x)
        rt.add_into(acc, y)
        rt.scale(acc, 1 / 3)
    rt.accumulate(many, dx, "copy")
    rt.accumulate(many, dy, "add")
    rt.accumulate(many, None, "scale", 1 / 3)
    fused = [rt.allocate(x.shape, x.dtype) for x in xs]  # the last micro-batch's add and scale in one pass
    rt.accumulate(fused, dx, "copy")
    rt.accumulate(fused, dy, "add_scale", 1 / 3)
    for a, b, c, x, y in zip(one, many, fused, xs, ys):
        np.testing.assert_array_equal(rt.copy_out(b), rt.copy_out(a))
        np.testing.assert_array_equal(rt.copy_out(c), rt.copy_out(a))
        np.testing.assert_allclose(rt.copy_out(b), (x + y) / 3, rtol=1e-6)


def test_accumulate_of_tensors_in_one_arena_is_one_launch_bit_for_bit():
    """A memory plan's accumulators and gradients share its arena: the merge is then one launch however many
    tensors (fused.cl's accumulate_table), with the bits of the tensor-at-a-time path, and touches nothing
    between them."""
    rt = opencl.OpenCLRuntime()
    rng = np.random.default_rng(1)
    shapes = [(3, 5), (7,), (0,), (2, 2, 3), (1,), (33,), (4, 4), (9,), (5, 1), (2,), (300,), (6, 6)]
    xs = [rng.standard_normal(sh).astype(np.float32) for sh in shapes]
    ys = [rng.standard_normal(sh).astype(np.float32) for sh in shapes]
    align = rt.arena_alignment
    offs = np.cumsum([0] + [-(-(4 * x.size + 256) // align) * align for x in xs] * 3)  # gaps between tensors
    arena = rt.allocate_arena(int(offs[-1]))
    rt.upload_into(arena, np.full(arena.shape, 0xAB, np.uint8))
    views = [rt.sub_buffer(arena, int(o), x.shape, np.float32) for o, x in zip(offs, xs * 3)]
    accs, dx, dy = views[:len(xs)], views[len(xs):2 * len(xs)], views[2 * len(xs):]
    for d, h in zip(dx + dy, xs + ys):
        rt.upload_into(d, h)
    launched = []
    run = rt.run
    rt.run = lambda k, *a: launched.append(k.name) or run(k, *a)
    rt.accumulate(accs, dx, "copy")
    rt.accumulate(accs, dy, "add")
    rt.accumulate(accs, None, "scale", 1 / 3)
    assert launched == ["accumulate_table_f32"] * 3
    for acc, x, y in zip(accs, xs, ys):
        one = rt.allocate(x.shape, x.dtype)  # device-written (a fed value keeps its host copy)
        rt.copy(one, rt.copy_in(x))
        rt.add_into(one, rt.copy_in(y))
        rt.scale(one, 1 / 3)
        np.testing.assert_array_equal(rt.copy_out(acc), rt.copy_out(one))
    rt.accumulate(accs, dx, "copy")
    rt.accumulate(accs, dy, "add_scale", 1 / 3)
    for acc, x, y in zip(accs, xs, ys):
        np.testing.assert_allclose(rt.copy_out(acc), (x + y) / 3, rtol=1e-6)
    raw = rt.copy_out(arena)
    for o, end, x in zip(offs, offs[1:], xs * 3):  # the gaps still hold the fill
        assert (raw[int(o) + 4 * x.size:int(end)] == 0xAB).all()
    # one pair outside the arena (a scalar the step keeps elsewhere): the arena's in one launch, it in another
    acc, x = rt.allocate((), np.float32), rt.copy_in(np.float32(2.5))
    launched.clear()
    rt.accumulate(accs[::-1] + [acc], dx[::-1] + [x], "copy")
    rt.accumulate(accs + [acc], dy + [x], "add_scale", 1 / 3)
    assert launched == ["accumulate_table_f32", "multi_accumulate_f32"] * 2
    np.testing.assert_allclose(rt.copy_out(acc), 5.0 / 3, rtol=1e-6)
    for acc, x, y in zip(accs, xs, ys):
        np.testing.assert_allclose(rt.copy_out(acc), (x + y) / 3, rtol=1e-6)


def test_reductions_short_long_and_split():
    rng = np.random.default_rng(5)
    x, big, wide = _rand(rng, 3, 700, 5), _rand(rng, 40000), _rand(rng, 30, 5, 40)

    def build(x, big, wide):
        return [tf.reduce_sum(x, 1), tf.reduce_mean(x, [0, 2]), tf.reduce_max(x, 2), tf.reduce_min(x),
                tf.reduce_sum(wide, [0, 2]), tf.reduce_max(wide, [0, 2]),
                tf.reduce_sum(big), tf.reduce_mean(big), tf.reduce_max(big), tf.nn.l2_loss(big),
                tf.argmax(x, 1), tf.argmin(x, 2, output_type=tf.int32)]
    run_both(build, [x, big, wide])


def test_softmax_and_fused_cross_entropies():
    rng = np.random.default_rng(6)
    logits = _rand(rng, 9, 13) * 4
    for label_dtype in (np.int32, np.int64):
        labels = rng.integers(0, 13, 9).astype(label_dtype)
        probs = rng.dirichlet(np.ones(13), 9).astype(np.float32)

        def build(x, lab, p):
            sparse = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=lab, logits=x)
            dense = tf.nn.softmax_cross_entropy_with_logits_v2(labels=p, logits=x)
            return [tf.nn.softmax(x), tf.nn.log_softmax(x), sparse, dense,
                    *tf.gradients(tf.reduce_sum(sparse) + tf.reduce_sum(dense), [x])]
        run_both(build, [logits, labels, probs], tol=(1e-5, 1e-5))


class _Asking:
    """A kernel context that records the workspaces its kernel asks for (and hands them out)."""

    def __init__(self, rt):
        self.runtime, self.asked = rt, []

    def workspace(self, shape, dtype):
        self.asked.append((tuple(int(d) for d in shape), np.dtype(getattr(dtype, "np", dtype))))
        return self.runtime.allocate(shape, dtype)


@pytest.mark.parametrize("compute_units", [2, 64])
def test_channel_sums_of_multi_output_ops_ask_for_the_declared_workspaces(compute_units):
    """The fused ReLU + bias gradient and batch norm's statistics and gradient sum per channel in chunks: their
    partials come from ctx.workspace as WORKSPACES declares them, and the results match the cpu kernels."""
    import importlib

    from tfplus.registry import WORKSPACES, TensorSpec, find_kernel
    for kernels in ("tfplus.kernels.numpy", "tfplus.kernels.opencl"):
        importlib.import_module(kernels)
    rt = opencl.OpenCLRuntime()
    rt.info = {**rt.info, "compute_units": compute_units}
    rng = np.random.default_rng(4)
    x, dy = _rand(rng, 8, 16, 16, 5), _rand(rng, 8, 16, 16, 5)
    c = np.full(5, 0.5, np.float32)
    bn = {"epsilon": 1e-3, "data_format": "NHWC", "is_training": True, "T": tf.float32, "U": tf.float32}
    relu = {"data_format": "NCHW", "activation": "Relu", "T": tf.float32}
    cases = [("FusedBatchNormGradV3", [dy, x, c, x.mean((0, 1, 2)), x.var((0, 1, 2)), np.zeros((), np.float32)],
              [x.shape, (5,), (5,), (0,), (0,)], bn),
             ("FusedBatchNormV3", [x, c, c, c, c], [x.shape, (5,), (5,), (5,), (5,), ()], bn),
             ("_FusedReluGradBiasAddGrad", [dy.transpose(0, 3, 1, 2).copy(), x.transpose(0, 3, 1, 2).copy()],
              [(8, 5, 16, 16), (5,)], relu)]

    for op, ins, out_shapes, attrs in cases:
        ctx = _Asking(rt)
        outs = [rt.allocate(s, np.float32) for s in out_shapes]
        find_kernel(op, "opencl", tf.float32)(ctx, [rt.copy_in(a) for a in ins], outs, attrs)
        specs = [TensorSpec(a.shape, tf.as_dtype(a.dtype), a) for a in ins]
        declared = [(tuple(s), np.dtype(d.np)) for s, d in WORKSPACES[(op, "opencl")](specs, attrs, compute_units)]
        assert ctx.asked == declared and ctx.asked, op
        want = [np.empty(s, np.float32) for s in out_shapes]
        find_kernel(op, "cpu", tf.float32)(_KernelContext(), [a.copy() for a in ins], want, attrs)
        for k in range(min(3, len(outs))):
            np.testing.assert_allclose(rt.copy_out(outs[k]), want[k], rtol=1e-4, atol=1e-3, err_msg=f"{op} {k}")


def test_bias_gradients_of_empty_tensors():
    """No channels, or no rows: the channel sums launch nothing or sum nothing (zeros)."""
    from tfplus.framework import apply_op
    for shape, fmt in [((4, 0, 3, 3), "NCHW"), ((5, 0), "NHWC"), ((0, 3, 2, 2), "NCHW"), ((0, 3), "NHWC")]:
        attrs = {"data_format": fmt, "activation": "Relu"}
        run_both(lambda g, f, fmt=fmt, attrs=attrs: [apply_op("BiasAddGrad", [g], {"data_format": fmt}),
                                                      *apply_op("_FusedReluGradBiasAddGrad", [g, f], attrs, "fused")],
                  [np.ones(shape, np.float32), np.ones(shape, np.float32)])


@pytest.mark.parametrize("rewrite, expected", [("0", 3), ("1", 1)])
def test_a_mean_loss_gradient_seed_launches_nothing(monkeypatch, rewrite, expected):
    """ones_like(loss) is a host value derived from a shape, so the seed's scaling by 1 / batch and its broadcast
    run on the host: unfused, the loss and its logits gradient take 3 launches (cross-entropy, mean, the one
    product); the graph rewrite makes them one (_FusedSparseXentMean)."""
    monkeypatch.setenv("TFPLUS_REWRITE", rewrite)
    rng = np.random.default_rng(7)
    logits, labels = _rand(rng, 6, 5), rng.integers(0, 5, 6).astype(np.int32)

    def build(x, lab):
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=lab, logits=x))
        return [loss, *tf.gradients(loss, [x]), tf.zeros_like(x) + 2.0]
    got = run_both(build, [logits, labels], tol=(1e-5, 1e-5))
    np.testing.assert_array_equal(got[2], np.full((6, 5), 2.0, np.float32))
    g = tf.Graph()
    with g.as_default():
        x, lab = tf.placeholder(tf.float32, [6, 5]), tf.placeholder(tf.int32, [6])
        fetches = build(x, lab)[:2]
    with tf.Session(graph=g, device="opencl") as s:
        s.run(fetches, {x: logits, lab: labels})
        rt, launches = s.runtime, []
        run = rt.run
        rt.run = lambda k, *args: (launches.append(k), run(k, *args))
        s.run(fetches, {x: logits, lab: labels})
    assert len(launches) == expected, launches


def test_elementwise_broadcasting_and_casts():
    rng = np.random.default_rng(7)
    a, b, c = _rand(rng, 4, 1, 6), _rand(rng, 3, 1), _rand(rng, 6)

    def build(a, b, c):
        return [a + b, a * c - b, tf.maximum(a, c), tf.pow(tf.abs(a) + 1, b), tf.where(a > c, a, a * 0 + c),
                tf.cast(a * 10, tf.int32), tf.squared_difference(a, b), tf.floormod(a, 0.7),
                tf.floordiv(a, 0.3),
                tf.nn.relu(a - c), tf.nn.sigmoid(a), tf.nn.tanh(b), tf.add_n([a, a, a, a, a, a])]
    run_both(build, [a, b, c], tol=(1e-5, 1e-5))


def test_array_ops_are_strided_copies():
    rng = np.random.default_rng(8)
    x = _rand(rng, 4, 5, 6)

    def build(x):
        return [tf.transpose(x, [2, 0, 1]), x[1:, ::-2, 3], tf.concat([x, 2 * x], 1), tf.stack([x, x], 2),
                tf.tile(x, [1, 2, 3]), tf.pad(x, [[1, 0], [0, 2], [1, 1]]), tf.unstack(x, axis=1)[3],
                tf.slice(x, [1, 2, 0], [2, -1, 3]), tf.broadcast_to(x[:, :1], [4, 3, 6]),
                tf.one_hot(tf.constant([0, 2, 1]), 3), tf.cumsum(x, 1, exclusive=True, reverse=True),
                *tf.gradients(tf.reduce_sum(x[1:, ::-2, 3] * 3.0), [x])]
    run_both(build, [x], tol=(1e-5, 1e-5))


@pytest.mark.parametrize("opt", ["sgd", "momentum", "nesterov", "adam", "rmsprop", "rmsprop_centered", "adagrad",
                                 "adadelta"])
def test_optimizer_updates(opt):
    """Two steps of each optimizer from the same start: variables and slots match the cpu device."""
    rng = np.random.default_rng(9)
    w0, grads = _rand(rng, 7, 5), [_rand(rng, 7, 5), _rand(rng, 7, 5)]
    results = {}
    for device in ("cpu", "opencl"):
        g = tf.Graph()
        with g.as_default():
            w = tf.Variable(w0)
            grad = tf.placeholder(tf.float32, [7, 5])
            o = {"sgd": tf.train.GradientDescentOptimizer(0.1), "adam": tf.train.AdamOptimizer(0.01),
                 "momentum": tf.train.MomentumOptimizer(0.1, 0.9),
                 "nesterov": tf.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True),
                 "rmsprop": tf.train.RMSPropOptimizer(0.01, momentum=0.5),
                 "rmsprop_centered": tf.train.RMSPropOptimizer(0.01, momentum=0.5, centered=True),
                 "adagrad": tf.train.AdagradOptimizer(0.1), "adadelta": tf.train.AdadeltaOptimizer(1.0)}[opt]
            step = o.apply_gradients([(grad, w)])
            init = tf.global_variables_initializer()
        with tf.Session(graph=g, device=device) as s:
            s.run(init)
            for gv in grads:
                s.run(step, {grad: gv})
            with g.as_default():
                results[device] = [s.run(v) for v in tf.global_variables()]
    for a, b in zip(results["opencl"], results["cpu"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_random_ops_are_repeatable_per_seed_and_well_distributed():
    g = tf.Graph()
    with g.as_default():
        tf.set_random_seed(3)
        u = tf.random_uniform([100000])
        z = tf.random_normal([100000])
        t = tf.truncated_normal([100000])
        x = tf.ones([1000, 100])
        d = tf.nn.dropout(x, keep_prob=0.25)
    with tf.Session(graph=g, device="opencl") as s:
        uv, zv, tv, dv = s.run([u, z, t, d])
        again = s.run(u)
    with tf.Session(graph=g, device="opencl") as s:
        fresh = s.run(u)
    np.testing.assert_array_equal(uv, fresh)          # same seeds, same run number: same numbers
    assert not np.array_equal(uv, again)              # the next run draws new ones
    assert 0 <= uv.min() and uv.max() < 1 and abs(uv.mean() - 0.5) < 0.01
    assert abs(zv.mean()) < 0.02 and abs(zv.std() - 1) < 0.02
    assert np.abs(tv).max() <= 2 and abs(tv.std() - 0.88) < 0.02
    assert set(np.unique(dv)) <= {0.0, 4.0} and abs((dv > 0).mean() - 0.25) < 0.01


# -- a whole training step -----------------------------------------------------------------------------------
def _small_mentee(**kw):
    # 16x16 images: a quarter of 32x32's work, each of the three pools still halving an even size.
    from tfplus.graphs.mentee import training_graph
    return training_graph(total_steps=100, seed=0, image_shape=(3, 16, 16), model_kwargs={
        "conv_widths": (4, 4, 8, 8, 16), "fc_widths": (16, 8)}, **kw)


def _batch(n=8, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 3, 16, 16)).astype(np.float32), rng.integers(0, 10, n).astype(np.int32)


@pytest.mark.parametrize("optimizer", ["momentum", "adam"])
def test_training_steps_match_cpu(optimizer):
    """Same start: after one step every variable and slot matches the cpu device; the losses of three steps
    track it (later steps amplify rounding differences through ReLU kinks: only losses are compared)."""
    tg = _small_mentee(optimizer=optimizer)
    with tg.graph.as_default():
        variables = tf.global_variables()
    runs = {}
    for device in ("cpu", "opencl"):
        with tf.Session(graph=tg.graph, device=device) as s:
            s.run(tg.init_op)
            if device == "cpu":
                start = [s.run(v) for v in variables]
            else:
                for v, value in zip(variables, start):
                    v.load(value, s)
            losses, after_one = [], None
            for i in range(3):
                feed = dict(zip((tg.images, tg.labels), _batch(seed=i)))
                losses.append(s.run([tg.train_op, tg.loss], feed)[1])
                after_one = after_one or [s.run(v) for v in variables]
            runs[device] = losses, after_one
    np.testing.assert_allclose(runs["opencl"][0], runs["cpu"][0], rtol=1e-3)
    for v, a, b in zip(variables, runs["opencl"][1], runs["cpu"][1]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(b).max()), err_msg=v.name)


def test_a_step_moves_only_the_batch_and_the_fetches_and_allocates_nothing_new():
    tg = _small_mentee()
    images, labels = _batch()
    with tf.Session(graph=tg.graph, device="opencl") as s:
        rt = s.runtime
        s.run(tg.init_op)
        for _ in range(2):
            s.run([tg.train_op, tg.loss], {tg.images: images, tg.labels: labels})
        h2d, d2h, allocations = rt.h2d_bytes, rt.d2h_bytes, rt.device_allocations
        for _ in range(3):
            s.run([tg.train_op, tg.loss], {tg.images: images, tg.labels: labels})
        assert rt.h2d_bytes - h2d == 3 * (images.nbytes + labels.nbytes)
        assert rt.d2h_bytes - d2h == 3 * 4  # the float32 loss
        assert rt.device_allocations == allocations


def test_shape_arithmetic_runs_on_the_host():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 4, 5])
        n = tf.shape(x)[0]
        y = tf.reshape(x, tf.stack([n, -1])) * tf.cast(n, tf.float32)
    with tf.Session(graph=g, device="opencl") as s:
        v = np.ones((3, 4, 5), np.float32)
        np.testing.assert_array_equal(s.run(y, {x: v}), np.full((3, 20), 3, np.float32))
        assert s.runtime.d2h_bytes == 3 * 20 * 4  # only the fetch came back


# -- missing kernels -----------------------------------------------------------------------------------------
def _cpu_only_op():
    from tfplus.registry import OPS, register_kernel, register_op
    from tfplus.tensor_shape import same_as_input
    if "TestCpuOnly" not in OPS:
        register_op("TestCpuOnly", inputs=("x",), attrs={"T": "type"}, shape_fn=same_as_input(0))

        @register_kernel("TestCpuOnly", "cpu")
        def _double(ctx, ins, outs, attrs):
            np.multiply(ins[0], 2, out=outs[0])
    from tfplus.framework import apply_op
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [3])
        y = tf.nn.relu(apply_op("TestCpuOnly", [tf.nn.relu(x)], name="doubler"))
    return g, x, y


def test_a_missing_kernel_raises_naming_the_devices_that_have_one():
    g, x, y = _cpu_only_op()
    with tf.Session(graph=g, device="opencl") as s:
        with pytest.raises(NotImplementedError, match=r"TestCpuOnly 'doubler'.*devices with a kernel.*cpu"):
            s.run(y, {x: np.ones(3, np.float32)})


@pytest.mark.parametrize("how", ["env", "config"])
def test_fallback_runs_on_the_cpu_and_reports_the_bytes(how, monkeypatch):
    g, x, y = _cpu_only_op()
    if how == "env":
        monkeypatch.setenv("TFPLUS_OPENCL_FALLBACK", "1")
    config = {"allow_soft_placement": True} if how == "config" else None
    with tf.Session(graph=g, device="opencl", config=config) as s:
        np.testing.assert_array_equal(s.run(y, {x: np.array([1, -1, 2], np.float32)}), [2, 0, 4])
        report = s.runtime.placement_report()
        assert s.runtime.fallbacks["doubler"] == {"op": "TestCpuOnly", "runs": 1, "h2d_bytes": 12,
                                                  "d2h_bytes": 12}
        assert "doubler" in report and "TestCpuOnly" in report


@pytest.mark.parametrize("compute_units", [2, 64])
def test_kernels_ask_for_exactly_the_declared_workspaces(compute_units):
    """Split reductions (matmul layers, filter-gradient partials, long sums) take their partials from
    ctx.workspace, just as WORKSPACES[(op, 'opencl')] declares them for the device's compute units; the
    results match the cpu kernels."""
    import importlib

    from tfplus.registry import WORKSPACES, TensorSpec, find_kernel
    for kernels in ("tfplus.kernels.numpy", "tfplus.kernels.opencl"):
        importlib.import_module(kernels)
    rt = opencl.OpenCLRuntime()
    rt.info = {**rt.info, "compute_units": compute_units}  # this runtime only: its launch plans follow it
    rng = np.random.default_rng(3)
    x, dy = _rand(rng, 4, 3, 16, 16), _rand(rng, 4, 8, 16, 16)
    conv = {"strides": [1, 1, 1, 1], "padding": "SAME", "data_format": "NCHW", "T": tf.float32}
    cases = [
        ("MatMul", [_rand(rng, 3, 4096), _rand(rng, 4096, 5)], (3, 5),
         {"transpose_a": False, "transpose_b": False, "T": tf.float32}),
        ("MatMul", [_rand(rng, 700, 2), _rand(rng, 9, 700)], (2, 9),
         {"transpose_a": True, "transpose_b": True, "T": tf.float32}),
        ("Conv2DBackpropFilter", [x, np.array([3, 3, 3, 8], np.int32), dy], (3, 3, 3, 8), conv),
        ("Sum", [_rand(rng, 3, 50000), np.array([1], np.int32)], (3,), {"keep_dims": False, "T": tf.float32}),
        ("Max", [_rand(rng, 200000), np.array([0], np.int32)], (), {"keep_dims": False, "T": tf.float32}),
        ("L2Loss", [_rand(rng, 300, 700)], (), {"T": tf.float32}),
        ("BiasAddGrad", [dy], (8,), {"data_format": "NCHW", "T": tf.float32}),
        ("BiasAddGrad", [_rand(rng, 8, 4, 32, 32)], (4,), {"data_format": "NCHW", "T": tf.float32}),
        ("BiasAddGrad", [_rand(rng, 2048, 6)], (6,), {"data_format": "NHWC", "T": tf.float32}),
        ("_FusedL2Loss", [_rand(rng, 3, 5)] * 4 + [_rand(rng, 9000)] * 5, (), {"N": 9, "T": tf.float32}),
    ]
    split = 0
    for op, ins, out_shape, attrs in cases:
        ctx = _Asking(rt)
        out = rt.allocate(out_shape, np.float32)
        find_kernel(op, "opencl", tf.float32)(ctx, [rt.copy_in(a) for a in ins], [out], attrs)
        asked = ctx.asked
        specs = [TensorSpec(a.shape, tf.as_dtype(a.dtype), a) for a in ins]
        declared = [(tuple(s), np.dtype(d.np)) for s, d in WORKSPACES[(op, "opencl")](specs, attrs, compute_units)]
        assert asked == declared, op
        split += bool(asked)
        want = np.empty(out_shape, np.float32)
        find_kernel(op, "cpu", tf.float32)(_KernelContext(), [a.copy() for a in ins], [want], attrs)
        np.testing.assert_allclose(rt.copy_out(out), want, rtol=1e-4, atol=1e-3, err_msg=op)
    assert split >= 4, "the cases exercise split reductions"


@pytest.mark.parametrize("compute_units", [8, 64])
def test_split_sums_finished_by_the_last_group_are_the_second_pass_bit_for_bit(monkeypatch, compute_units):
    """Split matmuls and per-channel sums (bias gradients, batch norm's) add their partial sums up in the
    kernel's last work-group (gemm.cl's GEMM_SPLIT_FINISH, fused.cl's CHANNEL_FINISH) instead of in a
    second launch: the same sums in the same order, so the same bits, whichever group comes last; and every
    finishing kernel leaves its counters at zero for the next launch."""
    import importlib

    import pyopencl as cl

    from tfplus.registry import find_kernel
    importlib.import_module("tfplus.kernels.opencl")
    from tfplus.kernels.opencl import fused, matmul, reduce
    rng = np.random.default_rng(5)
    bn = {"epsilon": 1e-3, "data_format": "NCHW", "is_training": True, "T": tf.float32, "U": tf.float32}
    xb, c = _rand(rng, 16, 3, 24, 24), np.full(3, 0.5, np.float32)
    cases = [
        ("MatMul", [_rand(rng, 6, 1000), _rand(rng, 1000, 40)], [(6, 40)],
         {"transpose_a": False, "transpose_b": False, "T": tf.float32}),
        ("BiasAddGrad", [_rand(rng, 16, 3, 32, 32)], [(3,)], {"data_format": "NCHW", "T": tf.float32}),
        ("BiasAddGrad", [_rand(rng, 1000, 40)], [(40,)], {"data_format": "NHWC", "T": tf.float32}),
        ("_FusedReluGradBiasAddGrad", [_rand(rng, 16, 3, 32, 32), _rand(rng, 16, 3, 32, 32)],
         [(16, 3, 32, 32), (3,)], {"data_format": "NCHW", "activation": "Relu", "T": tf.float32}),
        ("FusedBatchNormGradV3", [xb, xb, c, xb.mean((0, 2, 3)), xb.var((0, 2, 3)), np.zeros((), np.float32)],
         [xb.shape, (3,), (3,), (0,), (0,)], bn),
    ]
    got, second_passes = {}, {}
    for finish in (False, True):
        monkeypatch.setattr(matmul, "FINISH_LOADS", reduce.FINISH_LOADS if finish else 0)
        monkeypatch.setattr(fused, "FINISH_CHUNKS", reduce.FINISH_CHUNKS if finish else 0)
        rt = opencl.OpenCLRuntime()
        rt.info = {**rt.info, "compute_units": compute_units}  # this runtime only: its launch plans follow it
        launched = []
        run = rt.run
        rt.run = lambda k, *a, launched=launched, run=run: launched.append(k.name) or run(k, *a)
        for op, ins, shapes, attrs in cases:
            outs = [rt.allocate(s, np.float32) for s in shapes]
            find_kernel(op, "opencl", tf.float32)(_Asking(rt), [rt.copy_in(a) for a in ins], outs, attrs)
            got.setdefault(op + str(shapes), []).append([rt.copy_out(o) for o in outs[:3]])
        second_passes[finish] = sum(name.startswith(("sum_rows", "sum_wg")) for name in launched)
        for key, t in rt.dev.tables.items():  # the device's copies (copy_out would give the host's zeros)
            if key[0] == "split-counters":
                on_device = np.empty(t.shape, t.dtype)
                cl.enqueue_copy(rt.queue, on_device, rt.buffer(t), src_offset=t.block.off, is_blocking=True)
                assert not on_device.any(), key
    assert second_passes[False] >= len(cases) + 1 and second_passes[True] == 0, second_passes
    for name, (two_pass, finished) in got.items():
        for a, b in zip(two_pass, finished):
            assert np.array_equal(a, b), name
