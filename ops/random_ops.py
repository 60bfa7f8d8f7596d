"""Random ops. Seeds follow TF1: graph seed (tf.set_random_seed) and op seed pick a per-op stream."""
from __future__ import annotations

import numpy as np

from tfplus import dtypes as _dt
from tfplus import flops as _flops
from tfplus.framework import apply_op, convert_to_tensor, get_default_graph
from tfplus.ops.row_rules import rowwise
from tfplus.registry import not_differentiable, register_gradient, register_op, register_rows
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
    """Samples from U[minval, maxval); for an integer dtype, ints in [minval, maxval) (maxval required)."""
    dtype = _dt.as_dtype(dtype)
    if dtype.is_integer:
        return _random_uniform_int(shape, minval, maxval, dtype, seed, name)
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


def get_seed_pair(op_seed=None) -> tuple:
    """tf.random.get_seed: the (graph seed, op seed) an op with seed `op_seed` gets, (None, None) when neither
    is set (the op is then nondeterministic), as TF1 derives them."""
    seed, seed2 = get_seed(op_seed)
    return (None, None) if (seed, seed2) == (0, 0) else (seed, seed2)


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


# -- RandomUniformInt ----------------------------------------------------------------------------------------
def _uniform_int_shape(ins, attrs):
    shape, lo, hi = ins
    for s, what in ((lo, "minval"), (hi, "maxval")):
        if s.shape not in (None, ()):
            raise ValueError(f"RandomUniformInt: {what} must be a scalar, got shape {s.shape}")
    if lo.dtype != hi.dtype or lo.dtype not in (_dt.int32, _dt.int64):
        raise TypeError(f"RandomUniformInt: minval and maxval must both be int32 or int64, got {lo.dtype.name} and "
                        f"{hi.dtype.name}")
    return [spec(_random_shape(ins[:1], {"dtype": lo.dtype})[0].shape, lo.dtype)]


register_op("RandomUniformInt", inputs=("shape", "minval", "maxval"), outputs=("output",),
            attrs={"seed": "int", "seed2": "int", "Tout": "type", "T": "type"}, shape_fn=_uniform_int_shape,
            value_inputs=(0,), stateful=True, flops=_flops.zero)
not_differentiable("RandomUniformInt")


def _shape_tensor(shape):
    return convert_to_tensor(shape, dtype=_dt.int32) if not hasattr(shape, "op") else shape


def _random_uniform_int(shape, minval, maxval, dtype, seed, name):
    if maxval is None:
        raise ValueError(f"tf.random.uniform: an integer dtype ({dtype.name}) needs maxval")
    if isinstance(minval, int) and isinstance(maxval, int) and not minval < maxval:
        raise ValueError(f"tf.random.uniform: need minval < maxval, got {minval} >= {maxval}")
    from tfplus.framework import name_scope
    with name_scope(name, "random_uniform") as scope:
        seed, seed2 = get_seed(seed)
        shape = _shape_tensor(shape)
        lo, hi = convert_to_tensor(minval, dtype=dtype, name="min"), convert_to_tensor(maxval, dtype=dtype, name="max")
        return apply_op("RandomUniformInt", [shape, lo, hi], {"seed": seed, "seed2": seed2, "Tout": dtype,
                                                             "T": shape.dtype}, scope)


# -- RandomGamma / RandomPoissonV2: `shape` samples of each of the parameters' distributions -------------------
# NOTE: these and RandomUniformInt carry no "random" tag: a slice of a step's rows would not draw the unsplit
# step's numbers for them (gamma and Poisson take a varying count of numbers per sample), so micro-batches and
# workers leave a step that has them whole.
def _per_parameter_shape(op_type, out_dtype_attr):
    def fn(ins, attrs):
        head = _random_shape(ins[:1], {"dtype": ins[1].dtype})[0].shape
        param = ins[1].shape
        dtype = attrs[out_dtype_attr] if out_dtype_attr else ins[1].dtype
        if out_dtype_attr is None and dtype not in (_dt.float16, _dt.float32, _dt.float64):
            raise TypeError(f"{op_type}: alpha has dtype {dtype.name}; it takes float16, float32 or float64")
        return [spec(None if head is None or param is None else tuple(head) + tuple(param), dtype)]
    return fn


register_op("RandomGamma", inputs=("shape", "alpha"), outputs=("output",),
            attrs={"seed": "int", "seed2": "int", "S": "type", "T": "type"},
            shape_fn=_per_parameter_shape("RandomGamma", None), value_inputs=(0,), stateful=True, flops=_flops.zero)
register_op("RandomPoissonV2", inputs=("shape", "rate"), outputs=("output",),
            attrs={"seed": "int", "seed2": "int", "S": "type", "R": "type", "dtype": "type"},
            shape_fn=_per_parameter_shape("RandomPoissonV2", "dtype"), value_inputs=(0,), stateful=True,
            flops=_flops.zero)
not_differentiable("RandomPoissonV2")


@register_gradient("RandomGamma")
def _random_gamma_grad(op, grad):
    """TF differentiates the samples through alpha (implicit reparameterization, its RandomGammaGrad op)"""
    raise NotImplementedError(f"RandomGamma '{op.name}': tfplus has no gradient of gamma samples with respect to "
                              "alpha (TF's RandomGammaGrad); wrap alpha in tf.stop_gradient if you do not need it")


def random_gamma(shape, alpha, beta=None, dtype=_dt.float32, seed=None, name=None):
    """Samples of Gamma(alpha, beta) (rate beta, default 1): shape `shape + broadcast(alpha, beta).shape`."""
    from tfplus.framework import name_scope
    from tfplus.ops import array_ops, math_ops
    dtype = _dt.as_dtype(dtype)
    with name_scope(name, "random_gamma"):
        shape = _shape_tensor(shape)
        alpha = convert_to_tensor(alpha, dtype=dtype, name="alpha")
        beta = convert_to_tensor(1.0 if beta is None else beta, dtype=dtype, name="beta")
        alpha = math_ops.add(alpha, array_ops.zeros_like(beta))  # alpha broadcast with beta, as TF
        seed, seed2 = get_seed(seed)
        sample = apply_op("RandomGamma", [shape, alpha], {"seed": seed, "seed2": seed2, "S": shape.dtype})
        tiny = float(np.finfo(dtype.np).tiny)
        return math_ops.maximum(math_ops.realdiv(sample, beta), tiny)


def random_poisson(lam, shape, dtype=_dt.float32, seed=None, name=None):
    """Samples of Poisson(lam): shape `shape + lam.shape` (tf.random_poisson's TF1 argument order)."""
    lam = convert_to_tensor(lam)
    seed, seed2 = get_seed(seed)
    shape = _shape_tensor(shape)
    return apply_op("RandomPoissonV2", [shape, lam], {"seed": seed, "seed2": seed2, "S": shape.dtype,
                                                     "R": lam.dtype, "dtype": _dt.as_dtype(dtype)},
                    name or "random_poisson")


# -- stateless random ops: the numbers are a function of (shape, seed) only ----------------------------------
def _stateless_shape(ins, attrs):
    if ins[1].shape is not None and tuple(ins[1].shape) != (2,):
        raise ValueError(f"stateless random ops take a seed of shape [2], got {ins[1].shape}")
    return _random_shape(ins[:1], attrs)


_STATELESS_ATTRS = {"dtype": "type", "T": "type", "Tseed": "type"}
for _t in ("StatelessRandomNormal", "StatelessRandomUniform", "StatelessTruncatedNormal"):
    register_op(_t, inputs=("shape", "seed"), outputs=("output",), attrs=_STATELESS_ATTRS, shape_fn=_stateless_shape,
                value_inputs=(0,), flops=_flops.zero)
    not_differentiable(_t)


def _stateless(op_type, shape, seed, dtype, name):
    shape = _shape_tensor(shape)
    seed = convert_to_tensor(seed, dtype=_dt.int64) if not hasattr(seed, "op") else seed
    return apply_op(op_type, [shape, seed], {"dtype": _dt.as_dtype(dtype), "T": shape.dtype, "Tseed": seed.dtype},
                    name)


def stateless_random_normal(shape, seed, mean=0.0, stddev=1.0, dtype=_dt.float32, name=None):
    """N(mean, stddev^2) samples determined by `seed` (two ints): the same seed gives the same numbers."""
    from tfplus.framework import name_scope
    with name_scope(name, "stateless_random_normal"):
        return _affine(_stateless("StatelessRandomNormal", shape, seed, dtype, None), mean, stddev)


def stateless_random_uniform(shape, seed, minval=0.0, maxval=1.0, dtype=_dt.float32, name=None):
    """U[minval, maxval) samples determined by `seed` (two ints)."""
    from tfplus.framework import name_scope
    if _dt.as_dtype(dtype).is_integer:
        raise ValueError("tf.random.stateless_uniform: integer dtypes are not implemented by tfplus; draw floats and "
                         "use tf.floor")
    with name_scope(name, "stateless_random_uniform"):
        x = _stateless("StatelessRandomUniform", shape, seed, dtype, None)
        return _affine(x, minval, _sub(maxval, minval))


def stateless_truncated_normal(shape, seed, mean=0.0, stddev=1.0, dtype=_dt.float32, name=None):
    """N(mean, stddev^2) samples within two stddevs of the mean, determined by `seed` (two ints)."""
    from tfplus.framework import name_scope
    with name_scope(name, "stateless_truncated_normal"):
        return _affine(_stateless("StatelessTruncatedNormal", shape, seed, dtype, None), mean, stddev)


def stateless_categorical(logits, num_samples, seed, dtype=_dt.int64, name=None):
    """[batch, num_samples] class indices drawn from softmax(logits) rows, determined by `seed` (two ints): the
    Gumbel-max trick on stateless uniforms."""
    from tfplus.framework import name_scope
    from tfplus.ops import array_ops, math_ops
    with name_scope(name, "stateless_categorical"):
        logits = convert_to_tensor(logits)
        dims = array_ops.shape(logits)
        u = stateless_random_uniform(array_ops.stack([dims[0], num_samples, dims[1]]), seed, minval=1e-20,
                                     dtype=logits.dtype)
        gumbel = math_ops.negative(math_ops.log(math_ops.negative(math_ops.log(u))))
        samples = math_ops.argmax(math_ops.add(array_ops.expand_dims(logits, 1), gumbel), 2,
                                  output_type=_dt.as_dtype(dtype))
        samples.set_shape([logits.shape.as_list()[0] if logits.shape.ndims else None,
                           num_samples if isinstance(num_samples, int) else None])
        return samples
