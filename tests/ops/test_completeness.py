"""Every registered op is complete: shape function, gradient (or declared non-differentiable), a kernel on
every device, an entry in the op table (or a test of its own, named below), a FLOP formula; and every kernel's
declared facts hold: in-place writes, chunk specs, compact variants, scratch."""
import numpy as np
import pytest
from conftest import needs_opencl
from optable import all_cases

import tfplus as tf
import tfplus.kernels.numpy  # noqa: F401
import tfplus.kernels.opencl  # noqa: F401
import tfplus.train  # noqa: F401  (tf.train for the training graph)
from tfplus import flops as tf_flops
from tfplus.planner import chunking
from tfplus.registry import (
    FACTS,
    KERNELS,
    NOT_DIFFERENTIABLE,
    OPS,
    SCRATCH_ATTR,
    find_kernel,
    kernel_dtype,
    kernel_variant,
    kernels_for,
)
from tfplus.runtime import get_runtime, opencl

# Ops checked by dedicated tests instead of the forward/gradient table, and where.
TESTED_ELSEWHERE = {
    "Const": "everywhere", "Placeholder": "test_core", "PlaceholderWithDefault": "test_core",
    "NoOp": "test_core", "VariableV2": "test_core", "Assign": "test_core", "AssignAdd": "test_core",
    "IsVariableInitialized": "test_infra_scripts", "DenseToDenseSetOperation": "test_microbatch_losses",
    "AssignSub": "test_core", "RandomStandardNormal": "test_core", "TruncatedNormal": "test_core",
    "RandomUniform": "test_core", **dict.fromkeys(
        ("RandomUniformInt", "RandomGamma", "RandomPoissonV2", "StatelessRandomNormal", "StatelessRandomUniform",
         "StatelessTruncatedNormal"), "test_tf_random"),
    "ApplyGradientDescent": "test_train", "ApplyMomentum": "test_train",
    "ApplyAdam": "test_train", "ApplyRMSProp": "test_tf_train",
    "ApplyCenteredRMSProp": "test_tf_train", "ApplyAdagrad": "test_tf_train",
    "ApplyAdadelta": "test_tf_train",
    "Assert": "test_control_flow", "PyFunc": "test_training_infra", "Print": "test_training_infra",
    "CheckNumerics": "test_training_infra",
    "_FusedApply": "test_optimize", "_FusedMovingAverages": "test_rewrite_bn",
    "_FusedBatchNormRelu": "test_rewrite_bn", "_FusedBatchNormReluGrad": "test_rewrite_bn",
    "_FusedConv2DBackpropInputReluGrad": "test_backward_folds", "_FusedMaxPoolGradReluGrad": "test_backward_folds",
    "_FusedConv2DBackpropFilterBiasAddGrad": "test_backward_folds",
    "_MaxPoolArgmax": "test_argmax_pool", "_ReluMaxPoolGradArgmax": "test_argmax_pool",
    "_ReluMaskBits": "test_relu_bits", "_ReluGradBits": "test_relu_bits",
    "SaveV2": "test_tf_checkpoints", "RestoreV2": "test_tf_checkpoints", "MergeV2Checkpoints": "test_tf_checkpoints",
    **dict.fromkeys(("ScatterUpdate", "ScatterAdd", "ScatterSub", "ScatterMul", "ScatterDiv", "ScatterMin",
                     "ScatterMax"), "test_tf_sparse"),
    "_SparseApplyMomentum": "test_tf_sparse", "_SparseApplyRMSProp": "test_tf_sparse",
    "_SparseApplyCenteredRMSProp": "test_tf_sparse", "_SparseApplyAdagrad": "test_tf_sparse",
    "_SparseApplyAdadelta": "test_tf_sparse",
    "MpiAllreduce": "test_distributed", "MpiAllreduceStart": "test_distributed", "MpiAllreduceWait": "test_distributed",
}

# The executor itself produces these (feeds and variable buffers); they have no kernel on any device.
EXECUTOR_OPS = {"Placeholder", "VariableV2"}



def _project_ops():
    return {name: op for name, op in OPS.items() if not name.startswith("Test")}


def test_every_op_has_shape_fn_gradient_and_cpu_kernel():
    problems = []
    for name, op in _project_ops().items():
        if not callable(op.shape_fn):
            problems.append(f"{name}: no shape function")
        if op.grad is None:
            problems.append(f"{name}: no gradient and not declared with not_differentiable()")
        if name not in EXECUTOR_OPS and not any(dev == "cpu" for dev, _ in kernels_for(name)):
            problems.append(f"{name}: no cpu kernel")
    assert not problems, "\n".join(problems)


def test_every_op_is_in_the_op_table():
    covered = set()
    for case in all_cases():
        g = tf.Graph()
        with g.as_default():
            case.build_graph(tf.float64 if "float64" in case.dtypes else tf.float32)
        covered |= {op.type for op in g.get_operations()}
    missing = sorted(set(_project_ops()) - covered - set(TESTED_ELSEWHERE))
    assert not missing, f"ops with no op-table case: {missing}"


def test_every_op_has_an_opencl_kernel():
    missing = sorted(name for name, op in _project_ops().items()
                     if name not in EXECUTOR_OPS
                     and not any(dev == "opencl" for dev, _ in kernels_for(name)))
    assert not missing, f"ops with no opencl kernel: {missing}"


def test_differentiability_is_declared_not_defaulted():
    for name, op in _project_ops().items():
        assert op.grad is NOT_DIFFERENTIABLE or callable(op.grad), name


# -- kernel facts (tfplus.registry.KernelFacts, op FLOP formulas) ---------------------------------------------
DEVICES = ["cpu", pytest.param("opencl", marks=needs_opencl)]


def test_every_op_declares_its_flops():
    """Every op declares a FLOP formula (tfplus.flops), flops.zero only where it does no arithmetic: each
    formula gives a number for shapes of the op's arity, and ops that compute do not count zero."""
    problems = []
    for name, op in _project_ops().items():
        if not callable(op.flops):
            problems.append(f"{name}: no flops= in register_op (tfplus.flops.zero for data movement)")
    assert not problems, "\n".join(problems)
    for name in ("Relu", "Add", "MatMul", "Conv2D", "Sum", "ApplyAdam", "SparseSoftmaxCrossEntropyWithLogits",
                 "DepthwiseConv2dNative", "LRN", "FusedBatchNormV3"):
        assert OPS[name].flops is not tf_flops.zero, name
    assert tf_flops.of("Conv2D", [(2, 3, 8, 8), (3, 3, 3, 4)], [(2, 4, 8, 8)], {}) == 2 * 2 * 4 * 64 * 27
    assert tf_flops.of("Conv2DBackpropFilter", [(2, 3, 8, 8), (4,), (2, 4, 8, 8)], [(3, 3, 3, 4)], {}) == \
        tf_flops.of("Conv2D", [(2, 3, 8, 8), (3, 3, 3, 4)], [(2, 4, 8, 8)], {})
    assert tf_flops.is_matrix_product("MatMul") and not tf_flops.is_matrix_product("Relu")


def _op_instances():
    """(op, feeds) for every op of every float32 op-table case: its inputs are computable from the feeds."""
    found = []
    for case in all_cases():
        if "float32" not in case.dtypes:
            continue
        g = tf.Graph()
        with g.as_default():
            phs, _, arrays = case.build_graph(tf.float32)
        found += [(op, dict(zip(phs, arrays))) for op in g.get_operations()]
    return found


def _example(instances, op_type, usable):
    """An op of type `op_type` that `usable` accepts, with its input values, from the op table."""
    for op, feeds in instances:
        if op.type == op_type and usable(op):
            with tf.Session(graph=op.graph) as sess:
                return op, sess.run(list(op.inputs), feeds)
    raise AssertionError(f"no op-table case has a {op_type} op to check its kernel facts with: add one")


class _Ctx:
    """What a kernel sees of the executor here: the runtime, the op, fresh scratch buffers."""

    def __init__(self, op, runtime=None):
        self.op, self.runtime = op, runtime

    def workspace(self, shape, dtype):
        return np.empty(shape, getattr(dtype, "np", dtype))


@pytest.mark.parametrize("device", DEVICES)
def test_inplace_declarations_hold(device):
    """Every kernel that declares it may write its output over an input (KernelFacts.inplace) gives the same
    result when it does, on an op-table case's real inputs and attrs, as the cpu kernel (the reference)."""
    instances = _op_instances()
    if device == "opencl":
        rt = opencl.OpenCLRuntime()

        def put(a):  # device-computed memory (not a host-derived copy), as a planned kernel's input is
            d = rt.allocate(a.shape, a.dtype)
            rt.upload_into(d, a)
            return d
        get = rt.copy_out
    else:
        rt, put, get = None, np.copy, np.asarray
    checked = 0
    for (op_type, dev), facts in FACTS.items():
        if dev != device or not facts.inplace or op_type.startswith("Test"):
            continue

        def usable(op, ix=facts.inplace):
            out = op.outputs[0]
            return all(op.inputs[i].shape.is_fully_defined() and op.inputs[i].shape == out.shape
                       and op.inputs[i].dtype == out.dtype for i in ix)
        op, values = _example(instances, op_type, usable)
        kernel = find_kernel(op_type, device, kernel_dtype(op))
        # Output 0 is the one written over an input; the others (a fused op's bias gradient) get their own.
        refs = [np.zeros(t.shape.as_list(), t.dtype.np) for t in op.outputs]
        find_kernel(op_type, "cpu", kernel_dtype(op))(_Ctx(op), [np.copy(v) for v in values], refs, op.attrs)
        for i in facts.inplace:
            args = [put(np.asarray(v)) for v in values]
            outs = [args[i]] + [put(np.zeros_like(r)) for r in refs[1:]]
            kernel(_Ctx(op, rt), args, outs, op.attrs)
            for k, (out, ref) in enumerate(zip(outs, refs)):
                np.testing.assert_allclose(get(out), ref, rtol=1e-5, atol=1e-5, err_msg=f"{op_type} on {device} "
                                           f"written over input {i} ({op.name}): output {k}")
            checked += 1
    assert checked >= 20


def test_chunk_specs_only_on_kernels_that_accept_slices():
    """A kernel with a ChunkSpec gives the same result called on two halves of the batch (the planner's batch
    chunking, summed outputs added) and, with scratch_divisor, under SCRATCH_ATTR = 4."""
    instances = _op_instances()
    checked = 0
    for (op_type, device), facts in FACTS.items():
        spec = facts.chunk
        if spec is None or op_type.startswith("Test"):
            continue
        # NOTE: chunking.chunked_kernel slices NumPy arrays: a device with other buffers needs its own check.
        assert device == "cpu", f"{op_type} on {device} declares a ChunkSpec: extend this test to its buffers"
        def usable(op, b=spec.batch[0]):
            return op.outputs[0].shape.is_fully_defined() and op.inputs[b].shape.is_fully_defined() and \
                op.inputs[b].shape.as_list()[0] % 2 == 0
        op, values = _example(instances, op_type, usable)
        kernel = find_kernel(op_type, device, kernel_dtype(op))
        shape = tuple(op.outputs[0].shape.as_list())
        ref = np.zeros(shape, op.outputs[0].dtype.np)
        kernel(_Ctx(op), values, [ref], op.attrs)
        sizes = None if spec.size is None else chunking.chunk_sizes(values[spec.size], 2)
        halves = np.zeros_like(ref)
        chunking.chunked_kernel(kernel, op, 2, sizes, np.empty_like(ref), lambda: None)(
            _Ctx(op, get_runtime("cpu")), values, [halves], op.attrs)
        np.testing.assert_allclose(halves, ref, rtol=1e-5, atol=1e-5, err_msg=f"{op_type} in two chunks")
        if spec.scratch_divisor:
            divided = np.zeros_like(ref)
            kernel(_Ctx(op), values, [divided], {**op.attrs, SCRATCH_ATTR: 4})
            np.testing.assert_allclose(divided, ref, rtol=1e-5, atol=1e-5, err_msg=f"{op_type} scratch / 4")
        checked += 1
    assert checked >= 3


def test_training_path_kernels_declare_their_scratch(monkeypatch):
    """What the kernels of a training step allocate beyond their planned buffers and declared workspaces
    (engine.memory.audit_step) does not grow with the batch: only NumPy's fixed-size ufunc buffers and
    Python objects, no undeclared batch-sized temporaries."""
    monkeypatch.setenv("TFPLUS_NUM_THREADS", "1")  # more images, more shards: each with its own ufunc buffers
    from tfplus.engine.memory import audit_step
    from tfplus.graphs import get_model, training_graph
    tg = training_graph(get_model("mentee").build, total_steps=10, seed=0, image_shape=(3, 32, 32),
                        model_kwargs={"conv_widths": (8, 16), "fc_widths": (16,)})
    rng = np.random.default_rng(0)
    audits = []
    for batch in (8, 32):  # both past NumPy's ufunc buffer size (8192 elements per operand)
        feeds = {tg.images: rng.standard_normal((batch, 3, 32, 32)).astype(np.float32),
                 tg.labels: rng.integers(0, 10, batch).astype(np.int32)}
        with tf.Session(graph=tg.graph, memory_budget="1GB") as sess:
            sess.run(tg.init_op)
            audits.append(audit_step(sess, [tg.train_op, tg.loss], feeds))
    small, big = audits
    # The smallest activation here, the pool's 16 * 16 * 16 floats per image, is 384 kB more at batch 32 than at 8.
    grown = {name: (small.get(name, 0), n) for name, n in big.items() if n > small.get(name, 0) + 32_000}
    assert not grown, f"kernels allocating memory that grows with the batch, undeclared: {grown}"


def test_compact_variants_on_every_device_with_the_kernels():
    """planner.compact runs on any device: each one with MaxPool, MaxPoolGrad and ReluGrad kernels declares
    their "compact" variants."""
    for device in {d for (o, d, _t) in KERNELS if o == "MaxPool"}:
        for op_type in ("MaxPool", "MaxPoolGrad", "ReluGrad"):
            assert callable(kernel_variant(op_type, device, "compact")), (op_type, device)


def test_kernel_facts_are_one_per_op_and_device():
    """Declarations land in the derived tables at once; two kernels of one (op, device) declaring different
    facts, or a missing variant, raise naming the op."""
    from tfplus.planner.inplace import INPLACE
    from tfplus.registry import register_kernel, register_op
    from tfplus.tensor_shape import same_as_input

    register_op("TestFactsNeg", inputs=("x",), attrs={"T": "type"}, shape_fn=same_as_input(), flops=tf_flops.zero)

    @register_kernel("TestFactsNeg", "cpu", ("float32",), inplace=(0,))
    def _neg32(ctx, ins, outs, attrs):
        np.negative(ins[0], out=outs[0])

    assert INPLACE[("TestFactsNeg", "cpu")] == (0,) and ("TestFactsNeg", "cpu") in INPLACE
    with pytest.raises(ValueError, match="TestFactsNeg.*declare different facts"):
        register_kernel("TestFactsNeg", "cpu", ("float64",), inplace=(0, 1))(_neg32)
    with pytest.raises(NotImplementedError, match="no 'compact' variant of the TestFactsNeg kernel on cpu"):
        kernel_variant("TestFactsNeg", "cpu", "compact")
