"""tf.gradients: symbolic reverse mode. Adds gradient nodes (built from registered ops) to the graph.

A gradient is a Tensor or, for the params of a gather along axis 0, an IndexedSlices (TF1's sparse gradient).
IndexedSlices flow through Identity (a variable's read) as they are and are made dense before any other op's
gradient sees them (TF's ops do the same: only a few of its gradient functions accept them)."""
from __future__ import annotations

import numpy as np

from tfplus.framework import IndexedSlices, Operation, Tensor, convert_to_tensor, get_default_graph, name_scope
from tfplus.registry import NOT_DIFFERENTIABLE
from tfplus.tensor_shape import shapes_compatible


def _captured(x, graph) -> Tensor | None:
    """Inside a control-flow body (MAML's inner step in tf.map_fn) an outer tensor, or a variable's read, is
    used through its capture placeholder: that is the x the body's ys depend on."""
    captures = getattr(graph, "_captures", None)
    if not captures:
        return None
    for t in (x.value(), x._ref()) if hasattr(x, "_ref") else (convert_to_tensor(x),):
        if t in captures:
            return captures[t]
    return None


def _as_tensor_for_grad(x) -> Tensor:
    # A Variable's gradient is taken at its VariableV2 output, which every read of it flows from.
    if hasattr(x, "_ref"):
        return x._ref()
    return convert_to_tensor(x)


class AggregationMethod:
    """TF's tf.AggregationMethod, accepted by tf.gradients: tfplus sums a tensor's gradients by AddN whichever
    is asked (they differ in TF only in when the sums happen)."""
    ADD_N = 0
    DEFAULT = ADD_N
    EXPERIMENTAL_TREE = 1
    EXPERIMENTAL_ACCUMULATE_N = 2


class UnconnectedGradients:
    """TF's tf.UnconnectedGradients: what tf.gradients gives for an x that ys do not depend on."""
    NONE = "none"
    ZERO = "zero"


def gradients(ys, xs, grad_ys=None, name="gradients", stop_gradients=None, colocate_gradients_with_ops=False,
              gate_gradients=False, aggregation_method=None, unconnected_gradients=UnconnectedGradients.NONE):
    """Returns d(sum ys)/dx for each x in xs; None where x does not affect ys (zeros of x's shape with
    unconnected_gradients="zero"). Every op it adds is marked `backward` (what the memory planner and the
    profiler call the backward pass, whatever the scope's `name`).

        >>> import tfplus as tf
        >>> x = tf.constant(3.0); y = x * x
        >>> [g] = tf.gradients(y, [x])   # g evaluates to 6.0
    """
    unconnected = getattr(unconnected_gradients, "value", unconnected_gradients)  # TF's enum or its value
    if unconnected not in (UnconnectedGradients.NONE, UnconnectedGradients.ZERO):
        raise ValueError(f"tf.gradients: unconnected_gradients={unconnected_gradients!r}; it must be 'none' or "
                         "'zero' (tf.UnconnectedGradients.NONE or .ZERO)")
    ys = [convert_to_tensor(y) for y in (ys if isinstance(ys, (list, tuple)) else [ys])]
    xs_list = xs if isinstance(xs, (list, tuple)) else [xs]
    xs_t = [_as_tensor_for_grad(x) for x in xs_list]
    stop = {convert_to_tensor(s) for s in (stop_gradients or [])}
    if grad_ys is None:
        grad_ys = [None] * len(ys)
    elif not isinstance(grad_ys, (list, tuple)):
        grad_ys = [grad_ys]
    if len(grad_ys) != len(ys):
        raise ValueError(f"tf.gradients: {len(grad_ys)} grad_ys for {len(ys)} ys")

    from tfplus.ops import array_ops, math_ops
    graph = ys[0].graph if ys else get_default_graph()
    xs_t = [t if c is None else c for c, t in ((_captured(x, graph), t) for x, t in zip(xs_list, xs_t))]
    between = _ops_between(ys, xs_t, stop)
    first = graph.version  # the ops created from here on are the gradient's
    grads: dict[Tensor, list[Tensor]] = {}
    with name_scope(name):
        for y, gy in zip(ys, grad_ys):
            if not y.dtype.is_floating:
                raise TypeError(f"tf.gradients: y '{y.name}' has dtype {y.dtype.name}; it must be floating point")
            gy = array_ops.ones_like(y, name="grad_ys") if gy is None else convert_to_tensor(gy, dtype=y.dtype)
            grads.setdefault(y, []).append(gy)
        for op in sorted(between, key=lambda o: -o._id):
            out_grads = [_aggregate(grads.get(t), math_ops) for t in op.outputs]
            if all(g is None for g in out_grads):
                continue
            grad_fn = _gradient_of(op)
            if grad_fn is NOT_DIFFERENTIABLE:
                continue
            if op.type not in _PASS_SLICES:
                out_grads = [convert_to_tensor(g) if isinstance(g, IndexedSlices) else g for g in out_grads]
            made = len(graph._ops)
            with name_scope(op.name + "_grad"):
                in_grads = grad_fn(op, *out_grads)
            for new in graph._ops[made:]:  # what a summed loss's scaling finds (engine.step.scale_summed_losses)
                new.grad_of = op
            in_grads = list(in_grads) if isinstance(in_grads, (list, tuple)) else [in_grads]
            if len(in_grads) != len(op.inputs):
                raise ValueError(f"gradient of {op.type} '{op.name}' returned {len(in_grads)} values for "
                                 f"{len(op.inputs)} inputs")
            for t, g in zip(op.inputs, in_grads):
                if g is not None and t.dtype.is_floating and t not in stop:
                    if isinstance(g, Tensor) and shapes_compatible(g._shape, t._shape):
                        g.set_shape(t._shape)  # dx has x's shape: keep what is known of it (loop invariants)
                    grads.setdefault(t, []).append(g)
        out = [_aggregate(grads.get(x), math_ops) if x in grads else None for x in xs_t]
        if unconnected == UnconnectedGradients.ZERO:
            out = [array_ops.zeros_like(x) if g is None else g for g, x in zip(out, xs_t)]
    for op in graph.get_operations()[first:]:
        op.backward = True
    return out


# Gradients registered by name with tf.RegisterGradient (NOT_DIFFERENTIABLE for tf.NoGradient's), which ops made
# under Graph.gradient_override_map take instead of their type's.
USER_GRADIENTS: dict[str, object] = {}


class RegisterGradient:
    """TF1's decorator: `@tf.RegisterGradient("MyRelu") def _my_relu_grad(op, grad): ...`, then
    `with g.gradient_override_map({"Relu": "MyRelu"}):` makes Relu ops that take it."""

    def __init__(self, op_type: str):
        if not isinstance(op_type, str):
            raise TypeError("tf.RegisterGradient: the gradient's name must be a string")
        self._name = op_type

    def __call__(self, fn):
        _register_user_gradient(self._name, fn)
        return fn


def no_gradient(op_type: str) -> None:
    """TF1's tf.NoGradient: ops overridden to the name `op_type` pass no gradient (as a NotDifferentiable op)."""
    _register_user_gradient(op_type, NOT_DIFFERENTIABLE)


def custom_gradient(f):
    """TF's @tf.custom_gradient in graph mode: `f(*xs)` returns `(ys, grad_fn)`, and the gradient of ys is
    `grad_fn(*dys)` instead of what autodiff would find through f's ops (a gradient reversal layer, a clipped or
    numerically stable gradient). Where f reads variables, grad_fn must take `variables=` and return
    `(dxs, dvariables)`, as TF's. As TF, ys are an IdentityN of f's results whose gradient is overridden.

        >>> import tfplus as tf
        >>> @tf.custom_gradient
        ... def flip(x):
        ...     return tf.identity(x), lambda dy: -dy
    """
    import functools
    import inspect

    @functools.wraps(f)
    def decorated(*args, **kwargs):
        from tfplus.framework import GraphKeys
        from tfplus.ops.array_ops import identity_n
        if kwargs:
            raise TypeError(f"tf.custom_gradient: '{f.__name__}' was called with keyword arguments "
                            f"{sorted(kwargs)}; pass its tensors positionally, as TF's graph mode requires")
        graph = get_default_graph()
        xs = [convert_to_tensor(a) for a in args]
        ys, grad_fn = f(*xs)
        single = not isinstance(ys, (list, tuple))
        flat = [convert_to_tensor(y) for y in ([ys] if single else ys)]
        variables = _variables_between(flat, xs, graph.get_collection(GraphKeys.GLOBAL_VARIABLES) +
                                       graph.get_collection(GraphKeys.LOCAL_VARIABLES))
        takes_variables = "variables" in inspect.signature(grad_fn).parameters
        if variables and not takes_variables:
            raise TypeError(f"tf.custom_gradient: '{f.__name__}' reads the variables "
                            f"{[v.op.name for v in variables]}, so its grad_fn must accept a keyword argument "
                            "'variables' and return (input gradients, variable gradients)")

        def grad(op, *dys):
            dys = dys[:len(flat)]
            if takes_variables:
                dxs, dvars = grad_fn(*dys, variables=variables)
            else:
                dxs, dvars = grad_fn(*dys), []
            dxs = list(dxs) if isinstance(dxs, (list, tuple)) else [dxs]
            if len(dxs) != len(xs) or len(list(dvars)) != len(variables):
                raise ValueError(f"tf.custom_gradient: grad_fn of '{f.__name__}' returned {len(dxs)} input "
                                 f"gradients and {len(list(dvars))} variable gradients for {len(xs)} inputs and "
                                 f"{len(variables)} variables")
            return [None] * len(flat) + dxs + list(dvars)

        name = f"CustomGradient-{f.__name__}-{len(USER_GRADIENTS)}"
        _register_user_gradient(name, grad)
        with graph.gradient_override_map({"IdentityN": name}):
            outs = identity_n(flat + xs + [v._ref() for v in variables], name=f.__name__)
        outs = outs[:len(flat)]
        return outs[0] if single else outs
    return decorated


def _variables_between(ys: list, xs: list, candidates: list) -> list:
    """The variables among `candidates` whose values flow into `ys` other than through `xs`."""
    by_op = {v.op: v for v in candidates}
    seen, stack, found = set(), [y.op for y in ys], []
    stop = {x.op for x in xs}
    while stack:
        op = stack.pop()
        if op in seen or op in stop:
            continue
        seen.add(op)
        if op in by_op:
            found.append(by_op[op])
        stack.extend(t.op for t in op.inputs)
    return found


def _register_user_gradient(name: str, fn) -> None:
    if name in USER_GRADIENTS:
        raise KeyError(f"Registering two gradient with name '{name}'! (Previous registration was elsewhere in "
                       "this process; give the new gradient another name)")
    USER_GRADIENTS[name] = fn


def _gradient_of(op: Operation):
    """The op's gradient function: the one tf.RegisterGradient named for it, else its type's."""
    if op.gradient_op_type is not None:
        fn = USER_GRADIENTS.get(op.gradient_op_type)
        if fn is None:
            raise LookupError(f"No gradient defined for operation '{op.name}' (op type: {op.type}). In addition, "
                              f"its gradient was overridden to '{op.gradient_op_type}', which no "
                              "tf.RegisterGradient registered")
        return fn
    if op.op_def.grad is None:
        raise LookupError(f"No gradient defined for operation '{op.name}' (op type: {op.type}); "
                          "wrap its output in tf.stop_gradient if no gradient should flow through it")
    return op.op_def.grad


# Op types whose gradient passes an IndexedSlices through unchanged.
_PASS_SLICES = frozenset({"Identity"})


def _aggregate(parts, math_ops):
    """Sums the contributions of several consumers with one AddN node, as TF does: IndexedSlices among Tensors
    are made dense first; IndexedSlices alone are concatenated into one (values and indices, consumers in the
    order they were made)."""
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    if not all(isinstance(p, IndexedSlices) for p in parts):
        return math_ops.add_n([convert_to_tensor(p) for p in parts])
    from tfplus.ops import array_ops
    slices = parts[::-1]  # contributions arrive from the last consumer to the first
    if len({s.indices.dtype for s in slices}) > 1:  # TF concatenates mixed index dtypes as int64
        slices = [IndexedSlices(s.values, math_ops.cast(s.indices, "int64"), s.dense_shape) for s in slices]
    return IndexedSlices(array_ops.concat([s.values for s in slices], 0),
                         array_ops.concat([s.indices for s in slices], 0), slices[0].dense_shape)


def _ops_between(ys, xs, stop) -> set[Operation]:
    """Ops on a path from some x to some y (the only ones whose gradients matter)."""
    reach_from_x: set[Operation] = set()
    stack = [c for x in xs for c in x.consumers()]
    while stack:
        op = stack.pop()
        if op in reach_from_x:
            continue
        reach_from_x.add(op)
        for t in op.outputs:
            stack.extend(t.consumers())
    between: set[Operation] = set()
    stack = [y.op for y in ys]
    seen = set()
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        if op in reach_from_x:
            between.add(op)
        stack.extend(t.op for t in op.inputs if t not in stop)
    return between


def hessians(ys, xs, name="hessians", colocate_gradients_with_ops=False, gate_gradients=False,
             aggregation_method=None):
    """tf.hessians: for each x in xs, the Hessian of sum(ys) with respect to x, shaped x.shape + x.shape (None
    where x does not affect ys). TF builds the rows in a while loop; here one tf.gradients per element of x,
    so x's size must be known when the graph is built (a PINN's point, a layer's weights).

        >>> import tfplus as tf
        >>> x = tf.constant([1.0, 2.0])
        >>> [h] = tf.hessians(tf.reduce_sum(x ** 3), x)   # h evaluates to [[6, 0], [0, 12]]
    """
    from tfplus.ops import array_ops
    xs_list = xs if isinstance(xs, (list, tuple)) else [xs]
    out = []
    with name_scope(name):
        grads = gradients(ys, xs_list, colocate_gradients_with_ops=colocate_gradients_with_ops,
                          gate_gradients=gate_gradients, aggregation_method=aggregation_method)
        for grad, x in zip(grads, xs_list):
            if grad is None:
                out.append(None)
                continue
            x = _as_tensor_for_grad(x)
            shape = x.shape.as_list() if x.shape.ndims is not None else None
            if shape is None or None in shape:
                raise ValueError(f"tf.hessians: '{x.name}' has shape {x.shape}; tfplus needs its size known when "
                                 "the graph is built (set_shape, or a placeholder of a fixed shape)")
            flat = array_ops.reshape(convert_to_tensor(grad), [-1])
            rows = []
            for j in range(int(np.prod(shape, dtype=np.int64))):
                row = gradients(flat[j], x)[0]
                rows.append(array_ops.zeros_like(x) if row is None else convert_to_tensor(row))
            out.append(array_ops.reshape(array_ops.stack(rows), shape + shape))
    return out
