"""Every registered op is complete: shape function, gradient (or declared non-differentiable), a kernel on
every device, and an entry in the op table (or a test of its own, named below)."""
from test_op_table import all_cases

import tfplus as tf
import tfplus.kernels.numpy  # noqa: F401
import tfplus.kernels.opencl  # noqa: F401
from tfplus.registry import NOT_DIFFERENTIABLE, OPS, kernels_for

# Ops checked by dedicated tests instead of the forward/gradient table, and where.
TESTED_ELSEWHERE = {
    "Const": "everywhere", "Placeholder": "test_core", "PlaceholderWithDefault": "test_core",
    "NoOp": "test_core", "VariableV2": "test_core", "Assign": "test_core", "AssignAdd": "test_core",
    "AssignSub": "test_core", "RandomStandardNormal": "test_core", "TruncatedNormal": "test_core",
    "RandomUniform": "test_core", "ApplyGradientDescent": "test_train", "ApplyMomentum": "test_train",
    "ApplyAdam": "test_train", "ApplyRMSProp": "test_tf_train",
    "ApplyCenteredRMSProp": "test_tf_train", "ApplyAdagrad": "test_tf_train",
    "ApplyAdadelta": "test_tf_train",
    "Assert": "test_control_flow",
    "_FusedApply": "test_optimize",
    "SaveV2": "test_tf_checkpoints", "RestoreV2": "test_tf_checkpoints", "MergeV2Checkpoints": "test_tf_checkpoints",
}

# The executor itself produces these (feeds and variable buffers); they have no kernel on any device.
EXECUTOR_OPS = {"Placeholder", "VariableV2"}

# These read and write files: a cpu kernel on the host, and by design no OpenCL kernel.
HOST_ONLY_OPS = {"SaveV2", "RestoreV2", "MergeV2Checkpoints"}


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
                     if name not in EXECUTOR_OPS | HOST_ONLY_OPS
                     and not any(dev == "opencl" for dev, _ in kernels_for(name)))
    assert not missing, f"ops with no opencl kernel: {missing}"


def test_differentiability_is_declared_not_defaulted():
    for name, op in _project_ops().items():
        assert op.grad is NOT_DIFFERENTIABLE or callable(op.grad), name
