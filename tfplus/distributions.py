"""tf.distributions (TF1's tf.compat.v1.distributions): Normal, Bernoulli, Categorical and Uniform with sample,
log_prob, prob, cdf, entropy, mean, mode, stddev and variance, and kl_divergence between two of a kind, each
written with TF's formulas (tensorflow/python/ops/distributions/) from registered ops, so gradients flow through
their parameters and reparameterized samples.

    import tfplus as tf
    q = tf.distributions.Normal(loc=w_mu, scale=tf.nn.softplus(w_rho))
    w = q.sample()                                   # loc + scale * N(0, 1): differentiable in loc and scale
    kl = tf.reduce_sum(tf.distributions.kl_divergence(q, tf.distributions.Normal(0.0, 1.0)))
"""
from __future__ import annotations

import math

from tfplus import dtypes as _dt
from tfplus.framework import Tensor, convert_to_tensor, name_scope
from tfplus.nn_impl import sigmoid_cross_entropy_with_logits
from tfplus.ops import array_ops, math_ops, nn_ops, random_ops, special_math_ops
from tfplus.tensor_shape import TensorShape

__all__ = ["Distribution", "Normal", "Bernoulli", "Categorical", "Uniform", "kl_divergence",
           "FULLY_REPARAMETERIZED", "NOT_REPARAMETERIZED", "ReparameterizationType"]


class ReparameterizationType:
    def __init__(self, rep_type: str):
        self._rep_type = rep_type

    def __repr__(self):
        return f"<Reparameterization Type: {self._rep_type}>"


FULLY_REPARAMETERIZED = ReparameterizationType("FULLY_REPARAMETERIZED")
NOT_REPARAMETERIZED = ReparameterizationType("NOT_REPARAMETERIZED")


def _static_broadcast(*tensors) -> TensorShape:
    """The broadcast of the tensors' static shapes (unknown dims where not known)."""
    shapes = [t.shape for t in tensors]
    if any(s.ndims is None for s in shapes):
        return TensorShape(None)
    rank = max(s.ndims for s in shapes)
    dims = []
    for i in range(rank):
        here = [s.as_list()[i - rank + s.ndims] for s in shapes if i - rank + s.ndims >= 0]
        known = {d for d in here if d is not None and d != 1}
        dims.append(known.pop() if len(known) == 1 else (None if None in here or known else 1))
    return TensorShape(dims)


class Distribution:
    """The base: sample(sample_shape) draws n = prod(sample_shape) batches by `_sample_n` and shapes them
    sample_shape + batch_shape + event_shape, as TF's Distribution does."""

    def __init__(self, dtype, reparameterization_type, validate_args, allow_nan_stats, parameters, name):
        self._dtype, self._reparameterization_type = dtype, reparameterization_type
        self._validate_args, self._allow_nan_stats = validate_args, allow_nan_stats
        self._parameters, self._name = parameters, name

    dtype = property(lambda self: self._dtype)
    name = property(lambda self: self._name)
    parameters = property(lambda self: dict(self._parameters))
    reparameterization_type = property(lambda self: self._reparameterization_type)
    validate_args = property(lambda self: self._validate_args)
    allow_nan_stats = property(lambda self: self._allow_nan_stats)

    @property
    def batch_shape(self) -> TensorShape:
        return self._batch_shape()

    @property
    def event_shape(self) -> TensorShape:
        return TensorShape([])

    def batch_shape_tensor(self, name="batch_shape_tensor") -> Tensor:
        with name_scope(self._name), name_scope(name):
            shape = self.batch_shape
            if shape.is_fully_defined():
                return convert_to_tensor(shape.as_list(), dtype=_dt.int32)
            return self._batch_shape_tensor()

    def event_shape_tensor(self, name="event_shape_tensor") -> Tensor:
        return convert_to_tensor([], dtype=_dt.int32, name=name)

    def _scope(self, method: str):
        return name_scope(f"{self._name}/{method}")

    def sample(self, sample_shape=(), seed=None, name="sample") -> Tensor:
        with self._scope(name):
            if isinstance(sample_shape, Tensor):
                sample_shape = math_ops.cast(array_ops.reshape(sample_shape, [-1]), _dt.int32)
                n = math_ops.reduce_prod(sample_shape)
            else:
                sample_shape = [int(d) for d in ([sample_shape] if isinstance(sample_shape, int) else sample_shape)]
                n = int(math.prod(sample_shape))
            samples = self._sample_n(n, seed)
            rest = array_ops.shape(samples)[1:]
            out = array_ops.reshape(samples, array_ops.concat([sample_shape, rest], 0))
            if not isinstance(sample_shape, Tensor):
                out.set_shape(TensorShape(sample_shape).concatenate(samples.shape[1:]))
            return out

    def log_prob(self, value, name="log_prob") -> Tensor:
        with self._scope(name):
            return self._log_prob(convert_to_tensor(value))

    def prob(self, value, name="prob") -> Tensor:
        with self._scope(name):
            return math_ops.exp(self._log_prob(convert_to_tensor(value)))

    def cdf(self, value, name="cdf") -> Tensor:
        with self._scope(name):
            return self._cdf(convert_to_tensor(value, dtype=self._dtype))

    def log_cdf(self, value, name="log_cdf") -> Tensor:
        with self._scope(name):
            return math_ops.log(self._cdf(convert_to_tensor(value, dtype=self._dtype)))

    def survival_function(self, value, name="survival_function") -> Tensor:
        with self._scope(name):
            return 1.0 - self._cdf(convert_to_tensor(value, dtype=self._dtype))

    def entropy(self, name="entropy") -> Tensor:
        with self._scope(name):
            return self._entropy()

    def mean(self, name="mean") -> Tensor:
        with self._scope(name):
            return self._mean()

    def mode(self, name="mode") -> Tensor:
        with self._scope(name):
            return self._mode()

    def variance(self, name="variance") -> Tensor:
        with self._scope(name):
            return self._variance()

    def stddev(self, name="stddev") -> Tensor:
        with self._scope(name):
            return math_ops.sqrt(self._variance())

    def kl_divergence(self, other, name="kl_divergence") -> Tensor:
        return kl_divergence(self, other, name=name)

    def cross_entropy(self, other, name="cross_entropy") -> Tensor:
        with self._scope(name):
            return self._entropy() + kl_divergence(self, other)

    def _cdf(self, value):
        raise NotImplementedError(f"{type(self).__name__} '{self._name}': cdf is not implemented")


def _floats(name: str, **params):
    """The parameters as tensors of one floating dtype (the first tensor's, else float32)."""
    dtype = next((p.dtype for p in params.values() if isinstance(p, Tensor)), None)
    out = {}
    for key, value in params.items():
        out[key] = convert_to_tensor(value, dtype=dtype or _dt.float32, name=key)
        dtype = out[key].dtype
    if not dtype.is_floating:
        raise TypeError(f"tf.distributions.{name}: parameters must be floating point, got {dtype.name}")
    return out


class Normal(Distribution):
    """The normal distribution N(loc, scale^2), batched by broadcasting loc against scale."""

    def __init__(self, loc, scale, validate_args=False, allow_nan_stats=True, name="Normal"):
        with name_scope(name) as scope:
            params = _floats("Normal", loc=loc, scale=scale)
            self._loc = array_ops.identity(params["loc"], name="loc")
            self._scale = array_ops.identity(params["scale"], name="scale")
        super().__init__(self._loc.dtype, FULLY_REPARAMETERIZED, validate_args, allow_nan_stats,
                         {"loc": loc, "scale": scale}, scope.rstrip("/"))

    loc = property(lambda self: self._loc)
    scale = property(lambda self: self._scale)

    def _batch_shape(self):
        return _static_broadcast(self._loc, self._scale)

    def _batch_shape_tensor(self):
        return array_ops.shape(self._loc + self._scale)

    def _sample_n(self, n, seed=None):
        shape = array_ops.concat([[n] if not isinstance(n, Tensor) else array_ops.reshape(n, [1]),
                                  self.batch_shape_tensor()], 0)
        sampled = random_ops.random_normal(shape, mean=0.0, stddev=1.0, dtype=self._loc.dtype, seed=seed)
        return sampled * self._scale + self._loc

    def _z(self, x):
        return (x - self._loc) / self._scale

    def _log_prob(self, x):
        log_unnormalized = -0.5 * math_ops.squared_difference(x / self._scale, self._loc / self._scale)
        log_normalization = 0.5 * math.log(2.0 * math.pi) + math_ops.log(self._scale)
        return log_unnormalized - log_normalization

    def _cdf(self, x):
        return _ndtr(self._z(x))

    def _entropy(self):
        scale = self._scale * array_ops.ones_like(self._loc)
        return 0.5 * math.log(2.0 * math.pi * math.e) + math_ops.log(scale)

    def _mean(self):
        return self._loc * array_ops.ones_like(self._scale)

    _mode = _mean

    def _variance(self):
        return math_ops.square(self._scale * array_ops.ones_like(self._loc))


def _ndtr(x):
    """The standard normal CDF by TF's special_math.ndtr: erf near 0, erfc in the tails (no cancellation)."""
    half_sqrt_2 = 0.5 * math.sqrt(2.0)
    w = x * half_sqrt_2
    z = math_ops.abs(w)
    y = math_ops.where(z < half_sqrt_2, 1.0 + math_ops.erf(w),
                       math_ops.where(w > 0.0, 2.0 - special_math_ops.erfc(z), special_math_ops.erfc(z)))
    return 0.5 * y


class Uniform(Distribution):
    """The uniform distribution on [low, high)."""

    def __init__(self, low=0.0, high=1.0, validate_args=False, allow_nan_stats=True, name="Uniform"):
        with name_scope(name) as scope:
            params = _floats("Uniform", low=low, high=high)
            self._low = array_ops.identity(params["low"], name="low")
            self._high = array_ops.identity(params["high"], name="high")
        super().__init__(self._low.dtype, FULLY_REPARAMETERIZED, validate_args, allow_nan_stats,
                         {"low": low, "high": high}, scope.rstrip("/"))

    low = property(lambda self: self._low)
    high = property(lambda self: self._high)

    def range(self, name="range"):
        with self._scope(name):
            return self._high - self._low

    def _batch_shape(self):
        return _static_broadcast(self._low, self._high)

    def _batch_shape_tensor(self):
        return array_ops.shape(self._low + self._high)

    def _sample_n(self, n, seed=None):
        shape = array_ops.concat([[n] if not isinstance(n, Tensor) else array_ops.reshape(n, [1]),
                                  self.batch_shape_tensor()], 0)
        samples = random_ops.random_uniform(shape, dtype=self._low.dtype, seed=seed)
        return self._low + (self._high - self._low) * samples

    def _log_prob(self, x):
        return math_ops.log(self._prob(x))

    def prob(self, value, name="prob"):
        with self._scope(name):
            return self._prob(convert_to_tensor(value, dtype=self._dtype))

    def _prob(self, x):
        broadcast_x = x * array_ops.ones_like(self._low) * array_ops.ones_like(self._high)
        inside = math_ops.logical_and(broadcast_x >= self._low, broadcast_x < self._high)
        return math_ops.where(inside, array_ops.ones_like(broadcast_x) / (self._high - self._low),
                              array_ops.zeros_like(broadcast_x))

    def _cdf(self, x):
        broadcast_x = x * array_ops.ones_like(self._low) * array_ops.ones_like(self._high)
        result = (broadcast_x - self._low) / (self._high - self._low)
        zeros, ones = array_ops.zeros_like(result), array_ops.ones_like(result)
        return math_ops.where(broadcast_x < self._low, zeros, math_ops.where(broadcast_x >= self._high, ones, result))

    def _entropy(self):
        return math_ops.log(self._high - self._low)

    def _mean(self):
        return (self._low + self._high) / 2.0

    def _mode(self):
        raise NotImplementedError("Uniform: mode is not defined (any point of [low, high) is one)")

    def _variance(self):
        return math_ops.square(self._high - self._low) / 12.0


def _logits_and_probs(name: str, logits, probs, multidimensional: bool):
    """TF's get_logits_and_probs: exactly one of them given; the other derived (sigmoid or softmax)."""
    if (logits is None) == (probs is None):
        raise ValueError(f"tf.distributions.{name}: pass exactly one of logits and probs")
    if logits is not None:
        logits = convert_to_tensor(logits, name="logits")
        if not logits.dtype.is_floating:
            logits = math_ops.cast(logits, _dt.float32)
        probs = nn_ops.softmax(logits, name="probs") if multidimensional else nn_ops.sigmoid(logits, name="probs")
        return logits, probs
    probs = convert_to_tensor(probs, name="probs")
    if not probs.dtype.is_floating:
        probs = math_ops.cast(probs, _dt.float32)
    if multidimensional:
        return math_ops.log(probs, name="logits"), probs
    return math_ops.subtract(math_ops.log(probs), math_ops.log1p(-probs), name="logits"), probs


class Bernoulli(Distribution):
    """A coin: 1 with probability probs = sigmoid(logits); samples of `dtype` (int32)."""

    def __init__(self, logits=None, probs=None, dtype=_dt.int32, validate_args=False, allow_nan_stats=True,
                 name="Bernoulli"):
        with name_scope(name) as scope:
            self._logits, self._probs = _logits_and_probs("Bernoulli", logits, probs, False)
        super().__init__(_dt.as_dtype(dtype), NOT_REPARAMETERIZED, validate_args, allow_nan_stats,
                         {"logits": logits, "probs": probs}, scope.rstrip("/"))

    logits = property(lambda self: self._logits)
    probs = property(lambda self: self._probs)

    def _batch_shape(self):
        return self._logits.shape

    def _batch_shape_tensor(self):
        return array_ops.shape(self._logits)

    def _sample_n(self, n, seed=None):
        shape = array_ops.concat([[n] if not isinstance(n, Tensor) else array_ops.reshape(n, [1]),
                                  self.batch_shape_tensor()], 0)
        uniform = random_ops.random_uniform(shape, seed=seed, dtype=self._probs.dtype)
        return math_ops.cast(math_ops.less(uniform, self._probs), self._dtype)

    def _log_prob(self, event):
        event = math_ops.cast(event, self._logits.dtype)
        logits = self._logits
        if not (event.shape.is_fully_defined() and logits.shape.is_fully_defined()
                and event.shape.as_list() == logits.shape.as_list()):
            logits, event = array_ops.ones_like(event) * logits, array_ops.ones_like(logits) * event
        return -sigmoid_cross_entropy_with_logits(labels=event, logits=logits)

    def _entropy(self):
        return -self._logits * (nn_ops.sigmoid(self._logits) - 1.0) + nn_ops.softplus(-self._logits)

    def _mean(self):
        return array_ops.identity(self._probs)

    def _mode(self):
        return math_ops.cast(self._probs > 0.5, self._dtype)

    def _variance(self):
        return self._probs * (1.0 - self._probs)


class Categorical(Distribution):
    """One of the last axis' classes, with probabilities softmax(logits); samples of `dtype` (int32)."""

    def __init__(self, logits=None, probs=None, dtype=_dt.int32, validate_args=False, allow_nan_stats=True,
                 name="Categorical"):
        with name_scope(name) as scope:
            self._logits, self._probs = _logits_and_probs("Categorical", logits, probs, True)
        if self._logits.shape.ndims == 0:
            raise ValueError(f"tf.distributions.Categorical '{scope.rstrip('/')}': logits must have rank >= 1")
        super().__init__(_dt.as_dtype(dtype), NOT_REPARAMETERIZED, validate_args, allow_nan_stats,
                         {"logits": logits, "probs": probs}, scope.rstrip("/"))

    logits = property(lambda self: self._logits)
    probs = property(lambda self: self._probs)

    @property
    def event_size(self):
        known = self._logits.shape.as_list()[-1] if self._logits.shape.ndims is not None else None
        return known if known is not None else array_ops.shape(self._logits)[-1]

    def _batch_shape(self):
        return self._logits.shape[:-1] if self._logits.shape.ndims is not None else TensorShape(None)

    def _batch_shape_tensor(self):
        return array_ops.shape(self._logits)[:-1]

    def _sample_n(self, n, seed=None):
        logits_2d = self._logits if self._logits.shape.ndims == 2 else \
            array_ops.reshape(self._logits, [-1, self.event_size])
        sample_dtype = _dt.int64 if self._dtype.size > 4 else _dt.int32
        draws = random_ops.multinomial(logits_2d, n, seed=seed, output_dtype=sample_dtype)
        draws = array_ops.reshape(array_ops.transpose(draws),
                                  array_ops.concat([[n] if not isinstance(n, Tensor) else array_ops.reshape(n, [1]),
                                                    self.batch_shape_tensor()], 0))
        return math_ops.cast(draws, self._dtype)

    def _log_prob(self, k):
        k = math_ops.cast(k, _dt.int32) if k.dtype not in (_dt.int32, _dt.int64) else k
        logits = self._logits
        if not (k.shape.is_fully_defined() and logits.shape.is_fully_defined()
                and k.shape.as_list() == logits.shape.as_list()[:-1]):
            # TF's _broadcast_cat_event_and_params: the event against the batch of logits.
            shape = _static_broadcast(array_ops.expand_dims(k, -1), logits)
            logits = logits * array_ops.ones_like(array_ops.expand_dims(k, -1), dtype=logits.dtype)
            k = k * array_ops.ones(array_ops.shape(logits)[:-1], dtype=k.dtype)
            logits.set_shape(shape)
            k.set_shape(shape[:-1] if shape.ndims is not None else shape)
        return -nn_ops.sparse_softmax_cross_entropy_with_logits(labels=k, logits=logits)

    def _entropy(self):
        return -math_ops.reduce_sum(nn_ops.log_softmax(self._logits) * self._probs, axis=-1)

    def _mode(self):
        return math_ops.cast(math_ops.argmax(self._logits, axis=-1), self._dtype)

    def _mean(self):
        raise NotImplementedError("Categorical: mean is not implemented (as in TF1)")

    def _variance(self):
        raise NotImplementedError("Categorical: variance is not implemented (as in TF1)")


# -- KL divergences: one per pair of classes, found along both classes' MROs as TF's registry finds them ------
def _kl_normal_normal(a: Normal, b: Normal):
    """KL(N(a) || N(b)) = (mu_a - mu_b)^2 / (2 s_b^2) + (s_a^2 / s_b^2 - 1) / 2 - log(s_a / s_b)"""
    diff_log_scale = math_ops.log(a.scale) - math_ops.log(b.scale)
    return (0.5 * math_ops.squared_difference(a.loc / b.scale, b.loc / b.scale)
            + 0.5 * special_math_ops.expm1(2.0 * diff_log_scale) - diff_log_scale)


def _kl_bernoulli_bernoulli(a: Bernoulli, b: Bernoulli):
    """KL = p_a log(p_a / p_b) + (1 - p_a) log((1 - p_a) / (1 - p_b)), in logits (softplus)"""
    delta_probs0 = nn_ops.softplus(-b.logits) - nn_ops.softplus(-a.logits)
    delta_probs1 = nn_ops.softplus(b.logits) - nn_ops.softplus(a.logits)
    return nn_ops.sigmoid(a.logits) * delta_probs0 + nn_ops.sigmoid(-a.logits) * delta_probs1


def _kl_categorical_categorical(a: Categorical, b: Categorical):
    """KL = sum_k p_a(k) (log p_a(k) - log p_b(k))"""
    delta_log_probs = nn_ops.log_softmax(a.logits) - nn_ops.log_softmax(b.logits)
    return math_ops.reduce_sum(nn_ops.softmax(a.logits) * delta_log_probs, axis=-1)


_KL = {(Normal, Normal): _kl_normal_normal, (Bernoulli, Bernoulli): _kl_bernoulli_bernoulli,
       (Categorical, Categorical): _kl_categorical_categorical}


def kl_divergence(distribution_a, distribution_b, allow_nan_stats=True, name=None) -> Tensor:
    """KL(a || b) for a pair of distributions tfplus has a formula for (Normal, Bernoulli, Categorical)."""
    for ta in type(distribution_a).__mro__:
        for tb in type(distribution_b).__mro__:
            fn = _KL.get((ta, tb))
            if fn is not None:
                with name_scope(name, f"KullbackLeibler_{ta.__name__}_{tb.__name__}"):
                    return fn(distribution_a, distribution_b)
    raise NotImplementedError(f"tf.distributions.kl_divergence: no KL(distribution_a || distribution_b) registered "
                              f"for {type(distribution_a).__name__} and {type(distribution_b).__name__}; tfplus has "
                              f"{sorted(f'{a.__name__}-{b.__name__}' for a, b in _KL)}")
