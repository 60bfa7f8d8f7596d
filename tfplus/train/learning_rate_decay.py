"""Learning-rate schedules (TF1's tf.train.*_decay): graph ops computing the rate from the global step.

    import tfplus as tf
    step = tf.train.get_or_create_global_step()
    lr = tf.train.cosine_decay(0.1, step, decay_steps=10000)
    train_op = tf.train.MomentumOptimizer(lr, 0.9).minimize(loss, global_step=step)

The rate's dtype is that of `learning_rate` (float32 for a Python number); the step is cast to it.
"""
from __future__ import annotations

import math

from tfplus.framework import Tensor, convert_to_tensor, name_scope
from tfplus.ops import math_ops
from tfplus.ops.array_ops import constant, identity
from tfplus.ops.random_ops import random_normal
from tfplus.tensor_util import infer_dtype

__all__ = ["exponential_decay", "natural_exp_decay", "inverse_time_decay", "polynomial_decay", "cosine_decay",
           "cosine_decay_restarts", "linear_cosine_decay", "piecewise_constant", "piecewise_constant_decay"]


def _is_tensor(v) -> bool:
    return isinstance(v, Tensor) or hasattr(v, "_as_tensor")


def _as(value, dtype) -> Tensor:
    """A number as a constant of `dtype`, a tensor (e.g. the int64 global step) cast to it."""
    if _is_tensor(value):
        return math_ops.cast(value, dtype)
    return constant(value, dtype=dtype)


def _require_step(global_step, fn: str) -> None:
    if global_step is None:
        raise ValueError(f"global_step is required for {fn}.")


def _decay_exponent(global_step, decay_steps, staircase: bool, dtype) -> Tensor:
    """global_step / decay_steps, floored when `staircase` (the rate then drops every decay_steps steps)."""
    p = math_ops.divide(_as(global_step, dtype), _as(decay_steps, dtype))
    return math_ops.floor(p) if staircase else p


def exponential_decay(learning_rate, global_step, decay_steps, decay_rate, staircase: bool = False,
                      name=None) -> Tensor:
    """learning_rate * decay_rate ^ (global_step / decay_steps); an integer exponent with staircase=True.

        >>> import tfplus as tf
        >>> lr = tf.train.exponential_decay(0.1, tf.train.get_or_create_global_step(), 1000, 0.96)
    """
    _require_step(global_step, "exponential_decay")
    with name_scope(name, "ExponentialDecay", [learning_rate, global_step]) as scope:
        lr = convert_to_tensor(learning_rate, name="learning_rate")
        p = _decay_exponent(global_step, decay_steps, staircase, lr.dtype)
        return math_ops.multiply(lr, math_ops.pow(_as(decay_rate, lr.dtype), p), name=scope)


def natural_exp_decay(learning_rate, global_step, decay_steps, decay_rate, staircase: bool = False,
                      name=None) -> Tensor:
    """learning_rate * exp(-decay_rate * global_step / decay_steps) (exponent floored with staircase=True).

        >>> import tfplus as tf
        >>> lr = tf.train.natural_exp_decay(0.1, tf.train.get_or_create_global_step(), 1000, 0.5)
    """
    _require_step(global_step, "natural_exp_decay")
    with name_scope(name, "NaturalExpDecay", [learning_rate, global_step]) as scope:
        lr = convert_to_tensor(learning_rate, name="learning_rate")
        p = _decay_exponent(global_step, decay_steps, staircase, lr.dtype)
        exponent = math_ops.exp(math_ops.multiply(math_ops.negative(_as(decay_rate, lr.dtype)), p))
        return math_ops.multiply(lr, exponent, name=scope)


def inverse_time_decay(learning_rate, global_step, decay_steps, decay_rate, staircase: bool = False,
                       name=None) -> Tensor:
    """learning_rate / (1 + decay_rate * global_step / decay_steps) (floored quotient with staircase=True).

        >>> import tfplus as tf
        >>> lr = tf.train.inverse_time_decay(0.1, tf.train.get_or_create_global_step(), 1000, 0.5)
    """
    _require_step(global_step, "inverse_time_decay")
    with name_scope(name, "InverseTimeDecay", [learning_rate, global_step]) as scope:
        lr = convert_to_tensor(learning_rate, name="learning_rate")
        p = _decay_exponent(global_step, decay_steps, staircase, lr.dtype)
        denom = math_ops.add(1.0, math_ops.multiply(_as(decay_rate, lr.dtype), p))
        return math_ops.divide(lr, denom, name=scope)


def polynomial_decay(learning_rate, global_step, decay_steps, end_learning_rate=0.0001, power=1.0,
                     cycle: bool = False, name=None) -> Tensor:
    """(learning_rate - end) * (1 - step / decay_steps) ^ power + end, with step = min(global_step,
    decay_steps); with cycle=True, decay_steps is instead stretched to its first multiple >= global_step.

        >>> import tfplus as tf
        >>> lr = tf.train.polynomial_decay(0.1, tf.train.get_or_create_global_step(), 1000, 0.001, power=2.0)
    """
    _require_step(global_step, "polynomial_decay")
    with name_scope(name, "PolynomialDecay", [learning_rate, global_step]) as scope:
        lr = convert_to_tensor(learning_rate, name="learning_rate")
        dtype = lr.dtype
        end = _as(end_learning_rate, dtype)
        step, steps = _as(global_step, dtype), _as(decay_steps, dtype)
        if cycle:
            # At step 0 the multiplier is 1, not ceil(0) = 0.
            multiplier = math_ops.where(math_ops.equal(step, 0.0), constant(1.0, dtype=dtype),
                                        math_ops.ceil(math_ops.divide(step, steps)))
            steps = math_ops.multiply(steps, multiplier)
        else:
            step = math_ops.minimum(step, steps)
        remaining = math_ops.subtract(1.0, math_ops.divide(step, steps))
        decayed = math_ops.multiply(math_ops.subtract(lr, end), math_ops.pow(remaining, _as(power, dtype)))
        return math_ops.add(decayed, end, name=scope)


def cosine_decay(learning_rate, global_step, decay_steps, alpha=0.0, name=None) -> Tensor:
    """learning_rate * ((1 - alpha) * 0.5 * (1 + cos(pi * min(global_step, decay_steps) / decay_steps))
    + alpha) (Loshchilov & Hutter's SGDR without restarts): from learning_rate down to alpha * learning_rate.

        >>> import tfplus as tf
        >>> lr = tf.train.cosine_decay(0.1, tf.train.get_or_create_global_step(), 10000)
    """
    _require_step(global_step, "cosine_decay")
    with name_scope(name, "CosineDecay", [learning_rate, global_step]) as scope:
        lr = convert_to_tensor(learning_rate, name="learning_rate")
        dtype = lr.dtype
        steps = _as(decay_steps, dtype)
        fraction = math_ops.divide(math_ops.minimum(_as(global_step, dtype), steps), steps)
        cosine = math_ops.multiply(0.5, math_ops.add(1.0, math_ops.cos(math_ops.multiply(math.pi, fraction))))
        decayed = math_ops.add(math_ops.multiply(1.0 - alpha, cosine), alpha)
        return math_ops.multiply(lr, decayed, name=scope)


def linear_cosine_decay(learning_rate, global_step, decay_steps, num_periods=0.5, alpha=0.0, beta=0.001,
                        name=None) -> Tensor:
    """learning_rate * ((alpha + linear) * cosine + beta) with t = min(global_step, decay_steps), linear =
    (decay_steps - t) / decay_steps and cosine = 0.5 (1 + cos(2 pi num_periods t / decay_steps)) (Bello et al.'s
    neural optimizer search).

        >>> import tfplus as tf
        >>> lr = tf.train.linear_cosine_decay(0.1, tf.train.get_or_create_global_step(), 10000)
    """
    return _linear_cosine(learning_rate, global_step, decay_steps, num_periods, alpha, beta, None, name,
                          "linear_cosine_decay", "LinearCosineDecay")


def noisy_linear_cosine_decay(learning_rate, global_step, decay_steps, initial_variance=1.0, variance_decay=0.55,
                              num_periods=0.5, alpha=0.0, beta=0.001, name=None) -> Tensor:
    """linear_cosine_decay with Gaussian noise of variance initial_variance / (1 + t)^variance_decay added to
    its linear term, drawn each run (tf.random_normal, as TF's).

        >>> import tfplus as tf
        >>> lr = tf.train.noisy_linear_cosine_decay(0.1, tf.train.get_or_create_global_step(), 10000)
    """
    def noise(t, dtype):
        variance = math_ops.divide(_as(initial_variance, dtype), math_ops.pow(math_ops.add(1.0, t), variance_decay))
        return random_normal([], stddev=math_ops.sqrt(variance), dtype=dtype)
    return _linear_cosine(learning_rate, global_step, decay_steps, num_periods, alpha, beta, noise, name,
                          "noisy_linear_cosine_decay", "NoisyLinearCosineDecay")


def _linear_cosine(learning_rate, global_step, decay_steps, num_periods, alpha, beta, noise, name, what, scope_name):
    _require_step(global_step, what)
    with name_scope(name, scope_name, [learning_rate, global_step]) as scope:
        lr = convert_to_tensor(learning_rate, name="learning_rate")
        dtype = lr.dtype
        steps = _as(decay_steps, dtype)
        t = math_ops.minimum(_as(global_step, dtype), steps)
        linear = math_ops.divide(math_ops.subtract(steps, t), steps)
        if noise is not None:
            linear = math_ops.add(linear, noise(t, dtype))
        fraction = math_ops.multiply(2.0 * num_periods, math_ops.divide(t, steps))
        cosine = math_ops.multiply(0.5, math_ops.add(1.0, math_ops.cos(math_ops.multiply(math.pi, fraction))))
        decayed = math_ops.add(math_ops.multiply(math_ops.add(alpha, linear), cosine), beta)
        return math_ops.multiply(lr, decayed, name=scope)


def cosine_decay_restarts(learning_rate, global_step, first_decay_steps, t_mul=2.0, m_mul=1.0, alpha=0.0,
                          name=None) -> Tensor:
    """Cosine decay with warm restarts (SGDR): period i lasts first_decay_steps * t_mul**i steps and starts from
    learning_rate * m_mul**i; within it the rate falls as in cosine_decay.

        >>> import tfplus as tf
        >>> lr = tf.train.cosine_decay_restarts(0.1, tf.train.get_or_create_global_step(), 1000)
    """
    _require_step(global_step, "cosine_decay_restarts")
    with name_scope(name, "SGDRDecay", [learning_rate, global_step]) as scope:
        lr = convert_to_tensor(learning_rate, name="learning_rate")
        dtype = lr.dtype
        fraction = math_ops.divide(_as(global_step, dtype), _as(first_decay_steps, dtype))
        if t_mul == 1.0:
            restart = math_ops.floor(fraction)
            fraction = math_ops.subtract(fraction, restart)
        else:
            # periods 1, t, t^2, ... end at (1 - t^i) / (1 - t): the restart is the i whose period holds fraction
            restart = math_ops.floor(math_ops.divide(
                math_ops.log(math_ops.subtract(1.0, math_ops.multiply(fraction, 1.0 - t_mul))), math.log(t_mul)))
            length = math_ops.pow(_as(t_mul, dtype), restart)
            done = math_ops.divide(math_ops.subtract(1.0, length), 1.0 - t_mul)
            fraction = math_ops.divide(math_ops.subtract(fraction, done), length)
        m_fac = math_ops.pow(_as(m_mul, dtype), restart)
        cosine = math_ops.multiply(math_ops.multiply(0.5, m_fac),
                                   math_ops.add(1.0, math_ops.cos(math_ops.multiply(math.pi, fraction))))
        decayed = math_ops.add(math_ops.multiply(1.0 - alpha, cosine), alpha)
        return math_ops.multiply(lr, decayed, name=scope)


def piecewise_constant(x, boundaries, values, name=None) -> Tensor:
    """values[0] while x <= boundaries[0], values[i] while boundaries[i-1] < x <= boundaries[i], values[-1]
    after the last boundary.

        >>> import tfplus as tf
        >>> step = tf.train.get_or_create_global_step()
        >>> lr = tf.train.piecewise_constant(step, [1000, 2000], [0.1, 0.01, 0.001])
    """
    if len(boundaries) != len(values) - 1:
        raise ValueError(f"piecewise_constant: {len(boundaries)} boundaries need {len(boundaries) + 1} "
                         f"values, got {len(values)}")
    with name_scope(name, "PiecewiseConstant", [x]) as scope:
        x = convert_to_tensor(x)
        bounds = [_boundary(b, x) for b in boundaries]
        values = _same_dtype_values(values)
        # The boundaries are sorted, so overwriting with each later piece whose lower boundary x exceeds
        # leaves the right one; the last select gets the schedule's name.
        if not bounds:
            return identity(values[0], name=scope)
        out = values[0]
        for i, (b, v) in enumerate(zip(bounds, values[1:])):
            out = math_ops.where(math_ops.greater(x, b), v, out, name=scope if i == len(bounds) - 1 else None)
        return out


def _boundary(b, x: Tensor):
    """A boundary comparable with x: numbers stay numbers (the comparison converts them to x's dtype and
    refuses to drop a fraction); an int32 tensor may be widened to an int64 x, other dtype mismatches raise
    (TF's rule: casting a float boundary to an integer would move it)."""
    if not _is_tensor(b):
        return b
    b = convert_to_tensor(b)
    if b.dtype is not x.dtype:
        if b.dtype.name == "int32" and x.dtype.name == "int64":
            return math_ops.cast(b, x.dtype)
        raise ValueError(f"piecewise_constant: boundary '{b.name}' has dtype {b.dtype.name} but x has "
                         f"{x.dtype.name}; cast one of them")
    return b


def _same_dtype_values(values) -> list[Tensor]:
    """The values as tensors of one dtype: the first tensor's, else float32/int32 as for Python numbers."""
    tensors = [convert_to_tensor(v) for v in values if _is_tensor(v)]
    dtype = tensors[0].dtype if tensors else infer_dtype(values[0])
    out = [convert_to_tensor(v) if _is_tensor(v) else constant(v, dtype=dtype) for v in values]
    for v in out:
        if v.dtype is not dtype:
            raise ValueError(f"piecewise_constant: values must all have one dtype, got {dtype.name} and "
                             f"{v.dtype.name}")
    return out


piecewise_constant_decay = piecewise_constant  # TF 1.15's second name for it
