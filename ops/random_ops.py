"""Random ops. Seeds follow TF1: graph seed (tf.set_random_seed) and op seed pick a per-op stream."""
from __future__ import annotations

from tfplus import dtypes as _dt
from tfplus import flops as _flops
from tfplus.framework import apply_op, convert_to_tensor, get_default_graph
from tfplus.ops.row_rules import rowwise
from tfplus.registry import not_differentiable, register_op, register_rows
from tfplus.tensor_shape import spec

_DEFAULT_GRAPH_SEED = 87654321


def get_seed(op_seed):
    """(seed, seed2) attrs as TF1 derives them; (0, 0) means nondeterministic."""
    graph_seed = get_default_graph().seed
    if graph_seed is None and op_seed is None:
        return 0, 0
    if graph_seed is None:
        graph_seed = _DEFAULT_GRAPH_SEED
    if op_seed is None:
        op_seed = len(get_default_graph()._ops)  # distinct and repeatable per op
    return int(graph_seed), int(op_seed)


def _random_shape(ins, attrs):
    shape = ins[0].value
    if shape is None:
        n = ins[0].shape[0] if ins[0].shape else None
        return [spec(None if n is None else (None,) * n, attrs["dtype"])]
    return [spec(tuple(int(d) for d in shape), attrs["dtype"])]


_ATTRS = {"dtype": "type", "seed": "int", "seed2": "int", "T": "type"}
for _t in ("RandomStandardNormal", "TruncatedNormal", "RandomUniform"):
    register_op(_t, inputs=("shape",), outputs=("output",), attrs=_ATTRS, shape_fn=_random_shape,
                value_inputs=(0,), stateful=True, flops=_flops.zero, tags=("random",))
    not_differentiable(_t)


# a draw shaped like the batch draws its rows' numbers of the unsplit step (tag random)
register_rows(rowwise, "RandomStandardNormal", "TruncatedNormal", "RandomUniform")
def _random(op_type, shape, dtype, seed, name):
    seed, seed2 = get_seed(seed)
    shape = convert_to_tensor(shape, dtype=_dt.int32) if not hasattr(shape, "op") else shape
    return apply_op(op_type, [shape], {"dtype": _dt.as_dtype(dtype), "seed": seed, "seed2": seed2,
                                       "T": shape.dtype}, name)


def random_normal(shape, mean=0.0, stddev=1.0, dtype=_dt.float32, seed=None, name=None):
    """Samples from N(mean, stddev^2)."""
    x = _random("RandomStandardNormal", shape, dtype, seed, name or "random_normal")
    return _affine(x, mean, stddev)


def truncated_normal(shape, mean=0.0, stddev=1.0, dtype=_dt.float32, seed=None, name=None):
    """Samples from N(mean, stddev^2), redrawing values more than 2 stddevs from the mean."""
    x = _random("TruncatedNormal", shape, dtype, seed, name or "truncated_normal")
    return _affine(x, mean, stddev)


def random_uniform(shape, minval=0.0, maxval=1.0, dtype=_dt.float32, seed=None, name=None):
    """Samples from U[minval, maxval)."""
    x = _random("RandomUniform", shape, dtype, seed, name or "random_uniform")
    if maxval is None:
        maxval = 1.0
    return _affine(x, minval, _sub(maxval, minval))


def _sub(a, b):
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) - float(b)
    from tfplus.ops import math_ops
    return math_ops.subtract(a, b)


def _affine(x, shift, scale):
    """x * scale + shift, skipping the ops when they would do nothing."""
    from tfplus.ops import math_ops
    if not (isinstance(scale, (int, float)) and scale == 1):
        x = math_ops.multiply(x, scale)
    if not (isinstance(shift, (int, float)) and shift == 0):
        x = math_ops.add(x, shift)
    return x


def set_random_seed(seed: int) -> None:
    """Sets the graph-level seed of the default graph: random ops become repeatable."""
    get_default_graph().seed = seed


def multinomial(logits, num_samples, seed=None, name=None, output_dtype=None):
    """[batch, num_samples] class indices drawn from the categorical distributions of the rows of `logits`
    ([batch, classes], unnormalized log-probabilities), as tf.multinomial / tf.random.categorical. Drawn with
    the Gumbel-max trick (argmax(logits - log(-log(U)))) from RandomUniform: TF's distribution, not TF's
    stream of numbers."""
    from tfplus.framework import name_scope
    from tfplus.ops import array_ops, math_ops
    with name_scope(name, "multinomial"):
        logits = convert_to_tensor(logits)
        if logits.shape.ndims not in (None, 2):
            raise ValueError(f"multinomial: logits '{logits.name}' must be [batch, classes], got {logits.shape}")
        dims = array_ops.shape(logits)
        u = random_uniform(array_ops.stack([dims[0], num_samples, dims[1]]), minval=1e-20, maxval=1.0,
                           dtype=logits.dtype, seed=seed)
        gumbel = math_ops.negative(math_ops.log(math_ops.negative(math_ops.log(u))))
        scores = math_ops.add(array_ops.expand_dims(logits, 1), gumbel)
        samples = math_ops.argmax(scores, 2, output_type=_dt.as_dtype(output_dtype or _dt.int64))
        samples.set_shape([logits.shape.as_list()[0] if logits.shape.ndims else None,
                           num_samples if isinstance(num_samples, int) else None])
        return samples


def categorical(logits, num_samples, dtype=None, seed=None, name=None):
    """tf.random.categorical: tf.multinomial with `dtype` for the indices."""
    return multinomial(logits, num_samples, seed, name, dtype)


def random_shuffle(value, seed=None, name=None):
    """`value` with its rows (axis 0, of known length) in a random order: the order of the top_k of as many
    RandomUniform draws, a uniform permutation."""
    from tfplus.framework import name_scope
    from tfplus.ops import array_ops, math_ops
    with name_scope(name, "random_shuffle"):
        value = convert_to_tensor(value)
        n = value.shape.as_list()[0] if value.shape.ndims else None
        if n is None:
            raise ValueError(f"tf.random_shuffle: tfplus needs the length of axis 0 of '{value.name}', got shape "
                             f"{value.shape}")
        order = math_ops.top_k(random_uniform([n], seed=seed), n)[1]
        return array_ops.gather(value, order)
