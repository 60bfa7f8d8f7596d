"""Elementwise ops whose kernels may write their output over an input: (op type, device) -> input indices.

When such an input dies at the op (no later reader, not fetched) and has the output's shape and dtype, the
planner gives the output that input's buffer: the arena needs one tensor less at that step, at no compute
cost.
An entry is a promise about the kernel: it reads every element of that input before writing the same
element of the output (a single ufunc call with out=, or a chain of them that only rereads `out`).
tests/test_planner.py checks every entry by running the kernel both ways (opencl: where a device is at hand).
"""
from __future__ import annotations

_BINARY = ("Add", "AddV2", "Sub", "Mul", "RealDiv", "Maximum", "Minimum", "SquaredDifference")
_UNARY = ("Neg", "Abs", "Square", "Exp", "Log", "Sqrt", "Rsqrt", "Reciprocal", "Sign", "Relu", "Relu6",
                "Tanh", "Sigmoid")

INPLACE: dict[tuple[str, str], tuple[int, ...]] = {
    **{(t, "cpu"): (0, 1) for t in _BINARY},
    **{(t, "cpu"): (0,) for t in _UNARY},
    ("AddN", "cpu"): (0,),        # copies input 0 into the output first, then adds the others
    ("BiasAdd", "cpu"): (0,),     # the bias broadcasts; the value input is overwritten
    ("ReluGrad", "cpu"): (1,),    # out = (features > 0), then out *= gradients: each element read first
    ("TanhGrad", "cpu"): (0,),    # out = y * y, then 1 - out, then * dy: y (input 0) is read first
    # OpenCL: one work-item per element reads element i of every input, then writes element i.
    **{(t, "opencl"): (0, 1) for t in _BINARY + ("ReluGrad", "TanhGrad")},
    **{(t, "opencl"): (0,) for t in _UNARY},
    ("AddN", "opencl"): (0,),     # later calls (past four inputs) reread the running sum, not input 0
    ("BiasAdd", "opencl"): (0,),
    # The graph rewrite's fused ops (tfplus.optimize): the cpu kernels' ufunc chains as above; dx is written
    # over the features (read first), not over the gradients.
    ("_FusedBiasAddRelu", "cpu"): (0,),
    ("_FusedReluGradBiasAddGrad", "cpu"): (1,),
    ("_FusedBiasAddRelu", "opencl"): (0,),
    ("_FusedReluGradBiasAddGrad", "opencl"): (0, 1),
}
