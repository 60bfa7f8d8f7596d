"""tf.distributions (TF1's tf.compat.v1.distributions): Normal, Bernoulli, Categorical, Uniform, Gamma, Exponential,
Beta, Dirichlet, Laplace, StudentT and Multinomial with sample, log_prob, prob, cdf, entropy, mean, mode, stddev and
variance, and kl_divergence between two of a kind (Gamma, Beta and Dirichlet too), each written with TF's formulas
(tensorflow/python/ops/distributions/) from registered ops, so gradients flow through their parameters and
reparameterized samples.

    import tfplus as tf
    q = tf.distributions.Normal(loc=w_mu, scale=tf.nn.softplus(w_rho))
    w = q.sample()                                   # loc + scale * N(0, 1): differentiable in loc and scale
    kl = tf.reduce_sum(tf.distributions.kl_divergence(q, tf.distributions.Normal(0.0, 1.0)))
"""
from __future__ import annotations

import functools
import math
import operator

import numpy as np

from tfplus import dtypes as _dt
from tfplus.framework import Tensor, convert_to_tensor, name_scope
from tfplus.nn_impl import sigmoid_cross_entropy_with_logits
from tfplus.ops import array_ops, math_ops, nn_ops, random_ops, special_math_ops
from tfplus.tensor_shape import TensorShape

__all__ = ["Distribution", "Normal", "Bernoulli", "Categorical", "Uniform", "Gamma", "Exponential", "Beta",
           "Dirichlet", "Laplace", "StudentT", "Multinomial", "kl_divergence", "FULLY_REPARAMETERIZED",
           "NOT_REPARAMETERIZED", "ReparameterizationType"]


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


class _Elementwise(Distribution):
    """A distribution of float parameters that broadcast against each other elementwise (its batch shape is
    theirs), each kept as an identity named as the parameter in the distribution's scope (TF's names), at
    self._<parameter>; its samples are reparameterized."""

    def __init__(self, validate_args, allow_nan_stats, name, **params):
        with name_scope(name) as scope:
            floats = _floats(type(self).__name__, **params)
            self._elementwise = [array_ops.identity(floats[k], name=k) for k in params]
        for k, t in zip(params, self._elementwise):
            setattr(self, f"_{k}", t)
        super().__init__(self._elementwise[0].dtype, FULLY_REPARAMETERIZED, validate_args, allow_nan_stats, params,
                         scope.rstrip("/"))

    def _batch_shape(self):
        return _static_broadcast(*self._elementwise)

    def _batch_shape_tensor(self):
        return array_ops.shape(functools.reduce(operator.add, self._elementwise))


class Normal(_Elementwise):
    """The normal distribution N(loc, scale^2), batched by broadcasting loc against scale."""

    def __init__(self, loc, scale, validate_args=False, allow_nan_stats=True, name="Normal"):
        super().__init__(validate_args, allow_nan_stats, name, loc=loc, scale=scale)

    loc = property(lambda self: self._loc)
    scale = property(lambda self: self._scale)

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


class Uniform(_Elementwise):
    """The uniform distribution on [low, high)."""

    def __init__(self, low=0.0, high=1.0, validate_args=False, allow_nan_stats=True, name="Uniform"):
        super().__init__(validate_args, allow_nan_stats, name, low=low, high=high)

    low = property(lambda self: self._low)
    high = property(lambda self: self._high)

    def range(self, name="range"):
        with self._scope(name):
            return self._high - self._low

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


def _batch_n_shape(n, batch_shape_tensor):
    """[n] + the batch shape, n a Python int or a scalar tensor."""
    return array_ops.concat([[n] if not isinstance(n, Tensor) else array_ops.reshape(n, [1]), batch_shape_tensor], 0)


def _nan_where(condition, value, allow_nan_stats: bool, what: str):
    """TF's allow_nan_stats: NaN where `condition` holds (a statistic undefined there); without it, an error."""
    if not allow_nan_stats:
        raise NotImplementedError(f"{what} is undefined for some parameters; tfplus implements it with "
                                  "allow_nan_stats=True only (NaN where undefined)")
    return math_ops.where(condition, array_ops.fill(array_ops.shape(value), math.nan) * array_ops.ones_like(value),
                          value)


class Gamma(_Elementwise):
    """The gamma distribution of `concentration` (shape) and `rate` (inverse scale); samples reparameterized."""

    def __init__(self, concentration, rate, validate_args=False, allow_nan_stats=True, name="Gamma"):
        super().__init__(validate_args, allow_nan_stats, name, concentration=concentration, rate=rate)

    concentration = property(lambda self: self._concentration)
    rate = property(lambda self: self._rate)

    def _sample_n(self, n, seed=None):
        return random_ops.random_gamma([n] if not isinstance(n, Tensor) else array_ops.reshape(n, [1]),
                                       self._concentration, self._rate, dtype=self._dtype, seed=seed)

    def _log_prob(self, x):
        log_unnormalized = special_math_ops.xlogy(self._concentration - 1.0, x) - self._rate * x
        return log_unnormalized - (special_math_ops.lgamma(self._concentration)
                                   - self._concentration * math_ops.log(self._rate))

    def _entropy(self):
        c = self._concentration
        return c - math_ops.log(self._rate) + special_math_ops.lgamma(c) + (1.0 - c) * special_math_ops.digamma(c)

    def _mean(self):
        return self._concentration / self._rate

    def _variance(self):
        return self._concentration / math_ops.square(self._rate)

    def _mode(self):
        mode = (self._concentration - 1.0) / self._rate
        return _nan_where(self._concentration < 1.0, mode, self._allow_nan_stats, "Gamma's mode")


class Exponential(Gamma):
    """The exponential distribution of `rate`: Gamma(1, rate), as TF derives it."""

    def __init__(self, rate, validate_args=False, allow_nan_stats=True, name="Exponential"):
        rate = _floats("Exponential", rate=rate)["rate"]
        super().__init__(array_ops.ones_like(rate), rate, validate_args, allow_nan_stats, name)
        self._parameters = {"rate": rate}

    def _sample_n(self, n, seed=None):
        # TF's: -log(U) / rate with U uniform on [tiny, 1)
        tiny = float(np.finfo(self._dtype.as_numpy_dtype).tiny)
        u = random_ops.random_uniform(_batch_n_shape(n, self.batch_shape_tensor()), minval=tiny, maxval=1.0,
                                      dtype=self._dtype, seed=seed)
        return -math_ops.log(u) / self._rate

    def _log_prob(self, x):
        return math_ops.log(self._rate) - self._rate * x


class Beta(Distribution):
    """The beta distribution on (0, 1) of concentration1 (alpha) and concentration0 (beta); samples by two
    gammas, reparameterized."""

    def __init__(self, concentration1=None, concentration0=None, validate_args=False, allow_nan_stats=True,
                 name="Beta"):
        with name_scope(name) as scope:
            params = _floats("Beta", concentration1=concentration1, concentration0=concentration0)
            self._concentration1 = array_ops.identity(params["concentration1"], name="concentration1")
            self._concentration0 = array_ops.identity(params["concentration0"], name="concentration0")
            self._total_concentration = self._concentration1 + self._concentration0
        super().__init__(self._concentration1.dtype, FULLY_REPARAMETERIZED, validate_args, allow_nan_stats,
                         {"concentration1": concentration1, "concentration0": concentration0}, scope.rstrip("/"))

    concentration1 = property(lambda self: self._concentration1)
    concentration0 = property(lambda self: self._concentration0)
    total_concentration = property(lambda self: self._total_concentration)

    def _batch_shape(self):
        return self._total_concentration.shape

    def _batch_shape_tensor(self):
        return array_ops.shape(self._total_concentration)

    def _sample_n(self, n, seed=None):
        ones = array_ops.ones_like(self._total_concentration)
        shape = [n] if not isinstance(n, Tensor) else array_ops.reshape(n, [1])
        gamma1 = random_ops.random_gamma(shape, self._concentration1 * ones, dtype=self._dtype, seed=seed)
        gamma2 = random_ops.random_gamma(shape, self._concentration0 * ones, dtype=self._dtype, seed=seed)
        return gamma1 / (gamma1 + gamma2)

    def _log_normalization(self):
        return special_math_ops.lbeta(array_ops.stack([self._concentration1 * array_ops.ones_like(
            self._total_concentration), self._concentration0 * array_ops.ones_like(self._total_concentration)], -1))

    def _log_prob(self, x):
        return (special_math_ops.xlogy(self._concentration1 - 1.0, x)
                + special_math_ops.xlog1py(self._concentration0 - 1.0, -x) - self._log_normalization())

    def _entropy(self):
        digamma = special_math_ops.digamma
        return (self._log_normalization() - (self._concentration1 - 1.0) * digamma(self._concentration1)
                - (self._concentration0 - 1.0) * digamma(self._concentration0)
                + (self._total_concentration - 2.0) * digamma(self._total_concentration))

    def _mean(self):
        return self._concentration1 / self._total_concentration

    def _variance(self):
        mean = self._mean()
        return mean * (1.0 - mean) / (1.0 + self._total_concentration)

    def _mode(self):
        mode = (self._concentration1 - 1.0) / (self._total_concentration - 2.0)
        undefined = math_ops.logical_or(self._concentration1 <= 1.0, self._concentration0 <= 1.0)
        return _nan_where(undefined, mode, self._allow_nan_stats, "Beta's mode")


class Dirichlet(Distribution):
    """The Dirichlet distribution over the simplex of the last axis of `concentration` (its event shape)."""

    def __init__(self, concentration, validate_args=False, allow_nan_stats=True, name="Dirichlet"):
        with name_scope(name) as scope:
            params = _floats("Dirichlet", concentration=concentration)
            self._concentration = array_ops.identity(params["concentration"], name="concentration")
            self._total_concentration = math_ops.reduce_sum(self._concentration, -1)
        if self._concentration.shape.ndims == 0:
            raise ValueError(f"tf.distributions.Dirichlet '{scope.rstrip('/')}': concentration must have rank >= 1")
        super().__init__(self._concentration.dtype, FULLY_REPARAMETERIZED, validate_args, allow_nan_stats,
                         {"concentration": concentration}, scope.rstrip("/"))

    concentration = property(lambda self: self._concentration)
    total_concentration = property(lambda self: self._total_concentration)

    @property
    def event_shape(self) -> TensorShape:
        return self._concentration.shape[-1:]

    def event_shape_tensor(self, name="event_shape_tensor") -> Tensor:
        return array_ops.shape(self._concentration)[-1:]

    def _batch_shape(self):
        return self._total_concentration.shape

    def _batch_shape_tensor(self):
        return array_ops.shape(self._total_concentration)

    def _sample_n(self, n, seed=None):
        gamma = random_ops.random_gamma([n] if not isinstance(n, Tensor) else array_ops.reshape(n, [1]),
                                        self._concentration, dtype=self._dtype, seed=seed)
        return gamma / math_ops.reduce_sum(gamma, -1, keepdims=True)

    def _log_prob(self, x):
        return (math_ops.reduce_sum(special_math_ops.xlogy(self._concentration - 1.0, x), -1)
                - special_math_ops.lbeta(self._concentration))

    def _entropy(self):
        k = math_ops.cast(array_ops.shape(self._concentration)[-1], self._dtype)
        digamma = special_math_ops.digamma
        return (special_math_ops.lbeta(self._concentration)
                + (self._total_concentration - k) * digamma(self._total_concentration)
                - math_ops.reduce_sum((self._concentration - 1.0) * digamma(self._concentration), -1))

    def _mean(self):
        return self._concentration / array_ops.expand_dims(self._total_concentration, -1)

    def _variance(self):
        scale = array_ops.expand_dims(self._total_concentration, -1)
        x = self._concentration / scale
        return x * (1.0 - x) / (1.0 + scale)

    def _mode(self):
        k = math_ops.cast(array_ops.shape(self._concentration)[-1], self._dtype)
        mode = (self._concentration - 1.0) / (array_ops.expand_dims(self._total_concentration, -1) - k)
        return _nan_where(math_ops.reduce_any(self._concentration <= 1.0, -1, keepdims=True) &
                          array_ops.ones_like(mode, dtype=_dt.bool_), mode, self._allow_nan_stats, "Dirichlet's mode")


class Laplace(_Elementwise):
    """The Laplace distribution of `loc` and `scale`: density exp(-|x - loc| / scale) / (2 scale)."""

    def __init__(self, loc, scale, validate_args=False, allow_nan_stats=True, name="Laplace"):
        super().__init__(validate_args, allow_nan_stats, name, loc=loc, scale=scale)

    loc = property(lambda self: self._loc)
    scale = property(lambda self: self._scale)

    def _sample_n(self, n, seed=None):
        # TF's: U uniform on (-1, 1), loc - scale * sign(U) * log(1 - |U|)
        tiny = float(np.finfo(self._dtype.as_numpy_dtype).tiny)
        u = random_ops.random_uniform(_batch_n_shape(n, self.batch_shape_tensor()), minval=tiny - 1.0,
                                      maxval=1.0, dtype=self._dtype, seed=seed)
        return self._loc - self._scale * math_ops.sign(u) * math_ops.log1p(-math_ops.abs(u))

    def _log_prob(self, x):
        return -math_ops.abs(x - self._loc) / self._scale - (math.log(2.0) + math_ops.log(self._scale))

    def _cdf(self, x):
        z = (x - self._loc) / self._scale
        return 0.5 - 0.5 * math_ops.sign(z) * special_math_ops.expm1(-math_ops.abs(z))

    def _entropy(self):
        scale = self._scale * array_ops.ones_like(self._loc)
        return math.log(2.0) + 1.0 + math_ops.log(scale)

    def _mean(self):
        return self._loc * array_ops.ones_like(self._scale)

    _mode = _mean

    def _variance(self):
        return 2.0 * math_ops.square(self._scale * array_ops.ones_like(self._loc))


class StudentT(_Elementwise):
    """Student's t distribution of `df` degrees of freedom, `loc` and `scale`."""

    def __init__(self, df, loc, scale, validate_args=False, allow_nan_stats=True, name="StudentT"):
        super().__init__(validate_args, allow_nan_stats, name, df=df, loc=loc, scale=scale)

    df = property(lambda self: self._df)
    loc = property(lambda self: self._loc)
    scale = property(lambda self: self._scale)

    def _ones(self):
        return array_ops.ones(self.batch_shape_tensor(), dtype=self._dtype)

    def _sample_n(self, n, seed=None):
        # TF's: N(0, 1) * rsqrt(Gamma(df / 2, 1 / 2) / df), then scaled and shifted
        shape = _batch_n_shape(n, self.batch_shape_tensor())
        normal = random_ops.random_normal(shape, dtype=self._dtype, seed=seed)
        df = self._df * self._ones()
        gamma = random_ops.random_gamma([n] if not isinstance(n, Tensor) else array_ops.reshape(n, [1]),
                                        0.5 * df, beta=0.5, dtype=self._dtype, seed=seed)
        return normal * math_ops.rsqrt(gamma / df) * self._scale + self._loc

    def _log_prob(self, x):
        y = (x - self._loc) / self._scale
        log_unnormalized = -0.5 * (self._df + 1.0) * math_ops.log1p(math_ops.square(y) / self._df)
        log_normalization = (math_ops.log(math_ops.abs(self._scale)) + 0.5 * math_ops.log(self._df)
                             + 0.5 * math.log(math.pi) + special_math_ops.lgamma(0.5 * self._df)
                             - special_math_ops.lgamma(0.5 * (self._df + 1.0)))
        return log_unnormalized - log_normalization

    def _entropy(self):
        v = array_ops.expand_dims(self._ones(), -1)
        beta_arg = array_ops.concat([v * array_ops.expand_dims(self._df, -1), v], -1) / 2.0
        digamma = special_math_ops.digamma
        return (math_ops.log(math_ops.abs(self._scale)) + 0.5 * math_ops.log(self._df)
                + special_math_ops.lbeta(beta_arg)
                + 0.5 * (self._df + 1.0) * (digamma(0.5 * (self._df + 1.0)) - digamma(0.5 * self._df)))

    def _mean(self):
        mean = self._loc * self._ones()
        return _nan_where(self._df * self._ones() <= 1.0, mean, self._allow_nan_stats, "StudentT's mean (df <= 1)")

    def _mode(self):
        return self._loc * self._ones()

    def _variance(self):
        df = self._df * self._ones()
        var = math_ops.square(self._scale) * self._ones() * df / (df - 2.0)
        var = math_ops.where(df > 2.0, var, array_ops.fill(array_ops.shape(var), math.inf) * array_ops.ones_like(var))
        return _nan_where(df <= 1.0, var, self._allow_nan_stats, "StudentT's variance (df <= 1)")


class Multinomial(Distribution):
    """Counts of `total_count` draws among the last axis' classes, with probabilities probs = softmax(logits)."""

    def __init__(self, total_count, logits=None, probs=None, validate_args=False, allow_nan_stats=True,
                 name="Multinomial"):
        with name_scope(name) as scope:
            self._logits, self._probs = _logits_and_probs("Multinomial", logits, probs, True)
            self._total_count = convert_to_tensor(total_count, dtype=self._probs.dtype, name="total_count")
            self._mean_val = array_ops.expand_dims(self._total_count, -1) * self._probs
        super().__init__(self._probs.dtype, NOT_REPARAMETERIZED, validate_args, allow_nan_stats,
                         {"total_count": total_count, "logits": logits, "probs": probs}, scope.rstrip("/"))

    total_count = property(lambda self: self._total_count)
    logits = property(lambda self: self._logits)
    probs = property(lambda self: self._probs)

    @property
    def event_shape(self) -> TensorShape:
        return self._mean_val.shape[-1:]

    def event_shape_tensor(self, name="event_shape_tensor") -> Tensor:
        return array_ops.shape(self._mean_val)[-1:]

    def _batch_shape(self):
        return self._mean_val.shape[:-1]

    def _batch_shape_tensor(self):
        return array_ops.shape(self._mean_val)[:-1]

    def _sample_n(self, n, seed=None):
        raise NotImplementedError(f"tf.distributions.Multinomial '{self._name}': sample is not implemented in "
                                  "tfplus; draw a tf.distributions.Categorical total_count times and sum the draws' "
                                  "tf.one_hot")

    def _log_prob(self, counts):
        counts = math_ops.cast(counts, self._dtype)
        log_unnormalized = math_ops.reduce_sum(counts * nn_ops.log_softmax(self._logits), -1)
        log_combinations = (special_math_ops.lgamma(self._total_count + 1.0)
                            - math_ops.reduce_sum(special_math_ops.lgamma(counts + 1.0), -1))
        return log_unnormalized + log_combinations

    def _mean(self):
        return array_ops.identity(self._mean_val)

    def _variance(self):
        return self._mean_val * (1.0 - self._probs)

    def _mode(self):
        raise NotImplementedError("Multinomial: mode is not implemented (as in TF1)")


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


def _kl_gamma_gamma(a: Gamma, b: Gamma):
    """KL = (c_a - c_b) psi(c_a) + lgamma(c_b) - lgamma(c_a) + c_b log(r_a / r_b) + c_a (r_b / r_a - 1)"""
    ca, cb, ra, rb = a.concentration, b.concentration, a.rate, b.rate
    return ((ca - cb) * special_math_ops.digamma(ca) + special_math_ops.lgamma(cb) - special_math_ops.lgamma(ca)
            + cb * math_ops.log(ra) - cb * math_ops.log(rb) + ca * (rb / ra - 1.0))


def _kl_beta_beta(a: Beta, b: Beta):
    """KL = log B(b) - log B(a) - psi(a1)(b1 - a1) - psi(a0)(b0 - a0) + psi(a1 + a0)(b1 + b0 - a1 - a0)"""
    digamma = special_math_ops.digamma
    return (b._log_normalization() - a._log_normalization()
            - digamma(a.concentration1) * (b.concentration1 - a.concentration1)
            - digamma(a.concentration0) * (b.concentration0 - a.concentration0)
            + digamma(a.total_concentration) * (b.total_concentration - a.total_concentration))


def _kl_dirichlet_dirichlet(a: Dirichlet, b: Dirichlet):
    """KL = sum_k (a_k - b_k)(psi(a_k) - psi(sum a)) - log B(a) + log B(b)"""
    digamma = special_math_ops.digamma
    digamma_diff = digamma(a.concentration) - digamma(math_ops.reduce_sum(a.concentration, -1, keepdims=True))
    return (math_ops.reduce_sum((a.concentration - b.concentration) * digamma_diff, -1)
            - special_math_ops.lbeta(a.concentration) + special_math_ops.lbeta(b.concentration))


_KL = {(Normal, Normal): _kl_normal_normal, (Bernoulli, Bernoulli): _kl_bernoulli_bernoulli,
       (Categorical, Categorical): _kl_categorical_categorical, (Gamma, Gamma): _kl_gamma_gamma,
       (Beta, Beta): _kl_beta_beta, (Dirichlet, Dirichlet): _kl_dirichlet_dirichlet}


def kl_divergence(distribution_a, distribution_b, allow_nan_stats=True, name=None) -> Tensor:
    """KL(a || b) for a pair of distributions tfplus has a formula for (Normal, Bernoulli, Categorical, Gamma and
    Exponential, Beta, Dirichlet)."""
    for ta in type(distribution_a).__mro__:
        for tb in type(distribution_b).__mro__:
            fn = _KL.get((ta, tb))
            if fn is not None:
                with name_scope(name, f"KullbackLeibler_{ta.__name__}_{tb.__name__}"):
                    return fn(distribution_a, distribution_b)
    raise NotImplementedError(f"tf.distributions.kl_divergence: no KL(distribution_a || distribution_b) registered "
                              f"for {type(distribution_a).__name__} and {type(distribution_b).__name__}; tfplus has "
                              f"{sorted(f'{a.__name__}-{b.__name__}' for a, b in _KL)}")


from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr(__name__, "tf.distributions")  # TF1's others: UnsupportedError, not AttributeError
