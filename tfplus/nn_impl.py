"""tf.nn functions that TF1 builds from other ops (its nn_impl.py, clip_ops.py): sigmoid cross-entropy, batch
normalization's formula, norm clipping. Each is a composite of registered ops, so its gradient, kernels on
every device and GraphDef export come from those ops.

    import tfplus as tf
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=z))
    grads, norm = tf.clip_by_global_norm(tf.gradients(loss, params), 5.0)
"""
from __future__ import annotations

from tfplus.framework import IndexedSlices, Tensor, convert_to_tensor, name_scope
from tfplus.ops import math_ops, nn_ops
from tfplus.ops.array_ops import expand_dims, identity, ones_like, squeeze, stop_gradient, zeros_like
from tfplus.ops.nn_ops import l2_loss, relu


def sigmoid_cross_entropy_with_logits(_sentinel=None, labels=None, logits=None, name=None) -> Tensor:
    """-labels * log(sigmoid(logits)) - (1 - labels) * log(1 - sigmoid(logits)), elementwise, computed as
    max(z, 0) - z * labels + log(1 + exp(-|z|)) so that large |z| neither overflows nor loses precision."""
    if _sentinel is not None or labels is None or logits is None:
        raise ValueError("sigmoid_cross_entropy_with_logits: pass labels= and logits= by name")
    with name_scope(name, "logistic_loss"):
        logits = convert_to_tensor(logits)
        labels = convert_to_tensor(labels, dtype=logits.dtype)
        if labels.shape.ndims is not None and logits.shape.ndims is not None and \
                not labels.shape.is_compatible_with(logits.shape):
            raise ValueError(f"sigmoid_cross_entropy_with_logits: logits shape {logits.shape} and labels shape "
                             f"{labels.shape} must be the same")
        # As TF, max(z, 0) and -|z| by one select on z >= 0: at z = 0 the gradient is then sigmoid(0) - labels
        # (relu's and abs's are 0 there, which would give -labels).
        zeros = zeros_like(logits)
        cond = math_ops.greater_equal(logits, zeros)
        relu_logits = math_ops.where(cond, logits, zeros)
        neg_abs_logits = math_ops.where(cond, -logits, logits)
        return math_ops.add(relu_logits - logits * labels, math_ops.log1p(math_ops.exp(neg_abs_logits)))


def batch_normalization(x, mean, variance, offset, scale, variance_epsilon, name=None) -> Tensor:
    """(x - mean) * scale / sqrt(variance + epsilon) + offset (TF1's formula and order: x * inv + (offset -
    mean * inv)); `offset` and `scale` may be None."""
    with name_scope(name, "batchnorm"):
        inv = math_ops.rsqrt(variance + variance_epsilon)
        if scale is not None:
            inv = inv * scale
        shift = -mean * inv if offset is None else offset - mean * inv
        return x * inv + shift


def global_norm(t_list, name=None) -> Tensor:
    """sqrt(sum of the squares of every element of every tensor in `t_list`); None entries are ignored, an
    IndexedSlices counts its values (as in TF: repeated indices are not summed first)."""
    ts = [convert_to_tensor(_values_of(t)) for t in t_list if t is not None]
    if not ts:
        raise ValueError("global_norm: t_list has no tensors")
    with name_scope(name, "global_norm"):
        half_squares = [l2_loss(t) for t in ts]
        total = half_squares[0] if len(half_squares) == 1 else math_ops.add_n(half_squares)
        return math_ops.sqrt(total * 2.0, name="global_norm")


def clip_by_global_norm(t_list, clip_norm, use_norm=None, name=None) -> tuple[list, Tensor]:
    """Scales every tensor by clip_norm / max(global_norm, clip_norm); returns (the scaled list with None
    entries kept, the global norm). A NaN or inf norm makes every output NaN, as in TF1."""
    if isinstance(t_list, Tensor) or not isinstance(t_list, (list, tuple)):
        raise TypeError("clip_by_global_norm: t_list must be a list of tensors")
    t_list = list(t_list)
    with name_scope(name, "clip_by_global_norm"):
        norm = global_norm(t_list) if use_norm is None else convert_to_tensor(use_norm)
        clip = convert_to_tensor(clip_norm, dtype=norm.dtype)
        # clip * min(1 / norm, 1 / clip), plus (norm - norm) so that a non-finite norm gives NaN everywhere
        scale = clip * math_ops.minimum(1.0 / norm, 1.0 / clip) + (norm - norm)
        out = [None if t is None else _like(t, identity(convert_to_tensor(_values_of(t)) *
                                                       math_ops.cast(scale, t.dtype),
                                                       name=f"clip_by_global_norm_{i}"))
               for i, t in enumerate(t_list)]
        return out, norm


def _values_of(t):
    """What clipping scales: an IndexedSlices' values, or the tensor itself."""
    return t.values if isinstance(t, IndexedSlices) else t


def _like(t, values):
    """`values` in `t`'s form: an IndexedSlices with t's indices when t is one (clipping keeps sparse gradients
    sparse), else the tensor."""
    return IndexedSlices(values, t.indices, t.dense_shape) if isinstance(t, IndexedSlices) else values


def clip_by_norm(t, clip_norm, axes=None, name=None) -> Tensor:
    """t * clip_norm / max(||t||_2, clip_norm), the norm over `axes` (all if None). A zero tensor stays zero
    with a zero (not NaN) gradient. An IndexedSlices is clipped by the norm of its values and stays one."""
    with name_scope(name, "clip_by_norm"):
        v = convert_to_tensor(_values_of(t))
        squares = math_ops.reduce_sum(v * v, axes, keepdims=True)
        nonzero = math_ops.greater(squares, zeros_like(squares))
        safe = math_ops.where(nonzero, squares, ones_like(squares))
        norm = math_ops.where(nonzero, math_ops.sqrt(safe), squares)
        return _like(t, identity(v * clip_norm / math_ops.maximum(norm, clip_norm)))


def xw_plus_b(x, weights, biases, name=None) -> Tensor:
    """matmul(x, weights) + biases (a BiasAdd)."""
    from tfplus.ops.nn_ops import bias_add
    with name_scope(name, "xw_plus_b"):
        return bias_add(math_ops.matmul(x, weights), biases, name="xw_plus_b")


def relu_layer(x, weights, biases, name=None) -> Tensor:
    """relu(matmul(x, weights) + biases)."""
    with name_scope(name, "relu_layer"):
        return relu(xw_plus_b(x, weights, biases), name="relu_layer")


def l2_normalize(x, axis=None, epsilon=1e-12, name=None, dim=None) -> Tensor:
    """x / sqrt(max(sum(x ** 2, axis), epsilon)), as TF1 computes it (x * rsqrt(max(...)))."""
    axis = dim if axis is None else axis
    with name_scope(name, "l2_normalize"):
        x = convert_to_tensor(x)
        square_sum = math_ops.reduce_sum(math_ops.square(x), axis, keepdims=True)
        return math_ops.multiply(x, math_ops.rsqrt(math_ops.maximum(square_sum, epsilon)), name=name)


def log_sigmoid(x, name=None) -> Tensor:
    """log(sigmoid(x)) = -softplus(-x), which neither overflows nor underflows."""
    from tfplus.ops.nn_ops import softplus
    with name_scope(name, "LogSigmoid") as scope:
        return math_ops.negative(softplus(math_ops.negative(convert_to_tensor(x))), name=scope)


def softsign(features, name=None) -> Tensor:
    """x / (1 + |x|)."""
    with name_scope(name, "Softsign"):
        x = convert_to_tensor(features)
        return math_ops.divide(x, math_ops.add(math_ops.abs(x), 1.0))


def swish(features, beta=1.0, name=None) -> Tensor:
    """x * sigmoid(beta * x) (also tf.nn.silu)."""
    from tfplus.ops.nn_ops import sigmoid
    with name_scope(name, "swish"):
        x = convert_to_tensor(features)
        return math_ops.multiply(x, sigmoid(x if beta == 1.0 else math_ops.multiply(x, beta)))


def selu(features, name=None) -> Tensor:
    """scale * (x if x > 0 else alpha * (exp(x) - 1)), TF's constants."""
    from tfplus.ops.nn_ops import elu
    with name_scope(name, "Selu"):
        x = convert_to_tensor(features)
        scale, alpha = 1.0507009873554805, 1.6732632423543772
        return math_ops.multiply(math_ops.where(math_ops.greater(x, 0.0), x, math_ops.multiply(elu(x), alpha)),
                                 scale)


# -- tf.math composites (TF1's math_ops.py builds these from other ops too) ----------------------------------
def reduce_logsumexp(input_tensor, axis=None, keepdims=False, name=None, reduction_indices=None,
                     keep_dims=None) -> Tensor:
    """log(sum(exp(x))) over `axis`, computed as max + log(sum(exp(x - max))) so it does not overflow."""
    axis = reduction_indices if axis is None else axis
    keepdims = bool(keep_dims) if keep_dims is not None else bool(keepdims)
    with name_scope(name, "ReduceLogSumExp"):
        x = convert_to_tensor(input_tensor)
        top = stop_gradient(math_ops.reduce_max(x, axis, keepdims=True))
        out = math_ops.log(math_ops.reduce_sum(math_ops.exp(x - top), axis, keepdims=True)) + top
        return out if keepdims else _squeeze_axes(out, axis, x)


def reduce_variance(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """mean((x - mean(x)) ** 2) over `axis`."""
    with name_scope(name, "reduce_variance"):
        x = convert_to_tensor(input_tensor)
        mean = math_ops.reduce_mean(x, axis, keepdims=True)
        return math_ops.reduce_mean(math_ops.squared_difference(x, mean), axis, keepdims=keepdims)


def reduce_std(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """sqrt(reduce_variance)."""
    with name_scope(name, "reduce_std"):
        return math_ops.sqrt(reduce_variance(input_tensor, axis, keepdims))


def _squeeze_axes(t: Tensor, axis, like: Tensor) -> Tensor:
    """`t` (reduced with keepdims) without the reduced axes of `like`."""
    from tfplus.ops.array_ops import reshape
    if axis is None:
        return reshape(t, [])
    from tfplus.ops.array_ops import squeeze
    return squeeze(t, [axis] if isinstance(axis, int) else list(axis))


def is_nan(x, name=None) -> Tensor:
    """x != x, elementwise."""
    with name_scope(name, "IsNan"):
        x = convert_to_tensor(x)
        return math_ops.not_equal(x, x)


def is_inf(x, name=None) -> Tensor:
    """|x| == inf, elementwise."""
    with name_scope(name, "IsInf"):
        return math_ops.equal(math_ops.abs(convert_to_tensor(x)), float("inf"))


def is_finite(x, name=None) -> Tensor:
    """Neither NaN nor infinite, elementwise."""
    with name_scope(name, "IsFinite"):
        return math_ops.logical_not(math_ops.logical_or(is_nan(x), is_inf(x)))


def scalar_mul(scalar, x, name=None) -> Tensor:
    """scalar * x."""
    with name_scope(name, "scalar_mul"):
        return math_ops.multiply(scalar, x)


def sequence_mask(lengths, maxlen=None, dtype=None, name=None) -> Tensor:
    """mask[..., j] = j < lengths[...]: [*lengths.shape, maxlen] (maxlen = max(lengths) when not given), bool or
    `dtype`."""
    from tfplus import dtypes as _dt
    from tfplus.ops.array_ops import expand_dims
    with name_scope(name, "SequenceMask"):
        lengths = convert_to_tensor(lengths)
        if maxlen is None:
            maxlen = math_ops.reduce_max(lengths)
        steps = math_ops.range(0, maxlen, 1, dtype=lengths.dtype)
        mask = math_ops.less(steps, expand_dims(lengths, -1))
        if isinstance(maxlen, int):
            mask.set_shape(lengths.shape.as_list() + [maxlen] if lengths.shape.ndims is not None else None)
        return mask if dtype is None else math_ops.cast(mask, _dt.as_dtype(dtype))


# -- Candidate sampling and the sampled losses (TF1's candidate_sampling_ops.py and nn_impl.py) -----------------------

def _candidate_sampler(probs, true_classes, num_sampled: int, unique: bool, seed, name: str):
    """(sampled_candidates int64 [num_sampled], true_expected_count [batch, num_true], sampled_expected_count
    [num_sampled]) for the distribution `probs` (NumPy, over [0, range_max)). Unique samples are drawn without
    replacement by the Gumbel top-k trick, others with replacement by tf.multinomial: TF's distribution, not
    its stream of numbers. A unique sample's expected counts are TF's: 1 - (1 - p)^tries, or p * num_sampled
    when tries == num_sampled, with the number of tries TF's rejection sampler would have made for this sample
    drawn alongside it (before its j-th new class, geometric with success 1 - the mass of the first j)."""
    import numpy as np

    from tfplus import dtypes as _dt
    from tfplus.ops import array_ops, random_ops
    range_max = len(probs)
    if unique and num_sampled > range_max:
        raise ValueError(f"{name}: num_sampled ({num_sampled}) must not exceed range_max ({range_max}) when unique")
    with name_scope(None, name):
        true_classes = convert_to_tensor(true_classes)
        if true_classes.shape.ndims not in (None, 2):
            raise ValueError(f"{name}: true_classes '{true_classes.name}' must be [batch, num_true], got "
                             f"{true_classes.shape}")
        log_p = array_ops.constant(np.log(probs), _dt.float32)
        p = array_ops.constant(probs, _dt.float32)
        if unique:
            u = random_ops.random_uniform([range_max + num_sampled], 1e-20, 1.0, seed=seed)
            gumbel = -math_ops.log(-math_ops.log(u[:range_max]))
            sampled = math_ops.top_k(log_p + gumbel, num_sampled)[1]  # in the order they would be drawn
            taken = math_ops.cumsum(array_ops.gather(p, sampled), exclusive=True)
            tries = math_ops.reduce_sum(1.0 + math_ops.floor(math_ops.log(u[range_max:]) / math_ops.log(taken)))

            def counts(ids):
                p_ids = array_ops.gather(p, ids)
                return math_ops.where(math_ops.equal(tries, float(num_sampled)), p_ids * float(num_sampled),
                                      1.0 - math_ops.exp(tries * math_ops.log1p(-p_ids)))
        else:
            sampled = array_ops.reshape(random_ops.multinomial(array_ops.expand_dims(log_p, 0), num_sampled,
                                                               seed=seed), [num_sampled])

            def counts(ids):
                return array_ops.gather(p, ids) * float(num_sampled)
        sampled = math_ops.cast(sampled, _dt.int64)
        return (array_ops.stop_gradient(sampled), array_ops.stop_gradient(counts(true_classes)),
                array_ops.stop_gradient(counts(sampled)))


def log_uniform_candidate_sampler(true_classes, num_true, num_sampled, unique, range_max, seed=None, name=None):
    """Samples ids from the log-uniform (Zipfian) distribution P(k) = log((k + 2) / (k + 1)) / log(range_max + 1)
    (words sorted by frequency), as tf.nn.log_uniform_candidate_sampler:
    (sampled_candidates, true_expected_count, sampled_expected_count)."""
    import numpy as np
    k = np.arange(range_max, dtype=np.float64)
    probs = np.log((k + 2.0) / (k + 1.0)) / np.log(range_max + 1.0)
    return _candidate_sampler(probs, true_classes, num_sampled, unique, seed, name or "LogUniformCandidateSampler")


def uniform_candidate_sampler(true_classes, num_true, num_sampled, unique, range_max, seed=None, name=None):
    """Samples ids uniformly from [0, range_max), as tf.nn.uniform_candidate_sampler."""
    import numpy as np
    return _candidate_sampler(np.full(range_max, 1.0 / range_max), true_classes, num_sampled, unique, seed,
                              name or "UniformCandidateSampler")


def _compute_sampled_logits(weights, biases, labels, inputs, num_sampled, num_classes, num_true, sampled_values,
                            subtract_log_q, remove_accidental_hits, partition_strategy, seed):
    """(logits [batch, num_true + num_sampled], labels of the same shape) of the true and the sampled classes,
    as TF1's _compute_sampled_logits: a gather of only those rows of `weights` and `biases`, so gradients reach
    only them (IndexedSlices)."""
    from tfplus import dtypes as _dt
    from tfplus.ops import array_ops
    labels = math_ops.cast(convert_to_tensor(labels), _dt.int64)
    if labels.shape.ndims == 1:
        labels = array_ops.expand_dims(labels, -1)
    inputs = convert_to_tensor(inputs)
    if sampled_values is None:
        sampled_values = log_uniform_candidate_sampler(labels, num_true, num_sampled, True, num_classes, seed)
    sampled, true_expected, sampled_expected = (array_ops.stop_gradient(convert_to_tensor(s))
                                                for s in sampled_values)
    sampled = math_ops.cast(sampled, _dt.int64)
    labels_flat = array_ops.reshape(labels, [-1])
    all_ids = array_ops.concat([labels_flat, sampled], 0)
    n_true = array_ops.shape(labels_flat)[0]
    all_w = array_ops.embedding_lookup(weights, all_ids, partition_strategy=partition_strategy)
    true_w, sampled_w = all_w[:n_true], all_w[n_true:]
    sampled_logits = math_ops.matmul(inputs, sampled_w, transpose_b=True)
    all_b = array_ops.embedding_lookup(biases, all_ids, partition_strategy=partition_strategy)
    true_b, sampled_b = all_b[:n_true], all_b[n_true:]
    dim = array_ops.shape(true_w)[1:2]
    # inputs [batch, dim] . true_w [batch, num_true, dim] along dim
    true_w = array_ops.reshape(true_w, array_ops.concat([[-1, num_true], dim], 0))
    true_logits = math_ops.reduce_sum(array_ops.expand_dims(inputs, 1) * true_w, -1)
    true_logits = true_logits + array_ops.reshape(true_b, [-1, num_true])
    sampled_logits = sampled_logits + sampled_b
    if remove_accidental_hits:
        # A sampled class that is one of the example's true classes gets logit -FLT_MAX (TF's weight).
        hits = math_ops.reduce_any(math_ops.equal(array_ops.expand_dims(labels, 2),
                                                  array_ops.reshape(sampled, [1, 1, -1])), axis=1)
        sampled_logits = sampled_logits + math_ops.cast(hits, sampled_logits.dtype) * -3.4028234663852886e38
    if subtract_log_q:
        true_logits = true_logits - math_ops.log(true_expected)
        sampled_logits = sampled_logits - math_ops.log(sampled_expected)
    out_logits = array_ops.concat([true_logits, sampled_logits], 1)
    out_labels = array_ops.concat([ones_like(true_logits) / float(num_true), zeros_like(sampled_logits)], 1)
    return out_logits, out_labels


def nce_loss(weights, biases, labels, inputs, num_sampled, num_classes, num_true=1, sampled_values=None,
             remove_accidental_hits=False, partition_strategy="mod", name="nce_loss", seed=None) -> Tensor:
    """Noise-contrastive estimation loss [batch]: logistic regression of the true classes against `num_sampled`
    classes drawn by `sampled_values` (default: the log-uniform sampler, unique), each logit less the log of its
    expected count, as tf.nn.nce_loss.

        loss = tf.reduce_mean(tf.nn.nce_loss(nce_w, nce_b, labels=[[3]], inputs=embed, num_sampled=5,
                                             num_classes=100))"""
    with name_scope(name, "nce_loss"):
        logits, labels = _compute_sampled_logits(weights, biases, labels, inputs, num_sampled, num_classes, num_true,
                                                 sampled_values, True, remove_accidental_hits, partition_strategy,
                                                 seed)
        return math_ops.reduce_sum(sigmoid_cross_entropy_with_logits(labels=labels, logits=logits), 1)


def sampled_softmax_loss(weights, biases, labels, inputs, num_sampled, num_classes, num_true=1, sampled_values=None,
                         remove_accidental_hits=True, partition_strategy="mod", name="sampled_softmax_loss",
                         seed=None) -> Tensor:
    """Softmax cross-entropy [batch] over the true classes and `num_sampled` sampled ones (logits less the log
    of their expected counts; sampled true classes removed), as tf.nn.sampled_softmax_loss."""
    from tfplus.ops.nn_ops import softmax_cross_entropy_with_logits_v2
    with name_scope(name, "sampled_softmax_loss"):
        logits, labels = _compute_sampled_logits(weights, biases, labels, inputs, num_sampled, num_classes, num_true,
                                                 sampled_values, True, remove_accidental_hits, partition_strategy,
                                                 seed)
        return softmax_cross_entropy_with_logits_v2(labels=stop_gradient(labels), logits=logits)


def weighted_cross_entropy_with_logits(labels=None, logits=None, pos_weight=None, name=None, targets=None) -> Tensor:
    """sigmoid_cross_entropy_with_logits with the positive term weighted by `pos_weight`, computed stably as
    (1 - labels) * logits + (1 + (pos_weight - 1) * labels) * (log(1 + exp(-|logits|)) + max(-logits, 0))."""
    labels = targets if labels is None else labels
    if labels is None or logits is None or pos_weight is None:
        raise ValueError("weighted_cross_entropy_with_logits: pass labels (or targets), logits and pos_weight")
    with name_scope(name, "logistic_loss"):
        logits = convert_to_tensor(logits)
        labels = convert_to_tensor(labels, dtype=logits.dtype)
        log_weight = 1.0 + (pos_weight - 1.0) * labels
        return (1.0 - labels) * logits + log_weight * (math_ops.log1p(math_ops.exp(-math_ops.abs(logits))) +
                                                       relu(-logits))


def crelu(features, name=None, axis=-1) -> Tensor:
    """Concatenated ReLU: relu of [features, -features] along `axis` (twice the channels)."""
    from tfplus.ops.array_ops import concat
    with name_scope(name, "CRelu"):
        x = convert_to_tensor(features)
        return relu(concat([x, -x], axis))


def log_poisson_loss(targets, log_input, compute_full_loss=False, name=None) -> Tensor:
    """exp(log_input) - log_input * targets, plus Stirling's approximation of log(targets!) (for targets > 1)
    with `compute_full_loss`."""
    import math
    with name_scope(name, "log_poisson_loss"):
        log_input = convert_to_tensor(log_input)
        targets = convert_to_tensor(targets, dtype=log_input.dtype)
        loss = math_ops.exp(log_input) - log_input * targets
        if not compute_full_loss:
            return loss
        safe = math_ops.maximum(targets, 1.0)  # keeps the log finite where the term is masked out
        stirling = targets * math_ops.log(safe) - targets + 0.5 * math_ops.log(2.0 * math.pi * safe)
        return loss + math_ops.where_v2(targets > 1.0, stirling, zeros_like(targets))


def sufficient_statistics(x, axes, shift=None, keep_dims=None, name=None, keepdims=None):
    """(count, sum of x, sum of x^2, shift) over `axes`, as tf.nn.sufficient_statistics (shift None: no shift)."""
    keep = bool(keepdims if keepdims is not None else keep_dims)
    with name_scope(name, "sufficient_statistics"):
        x = convert_to_tensor(x)
        count = _count(x, axes)
        if shift is not None:
            shift = convert_to_tensor(shift, dtype=x.dtype)
            m_ss = math_ops.reduce_sum(x - shift, axes, keepdims=keep)
            v_ss = math_ops.reduce_sum(math_ops.square(x - shift), axes, keepdims=keep)
        else:
            m_ss = math_ops.reduce_sum(x, axes, keepdims=keep)
            v_ss = math_ops.reduce_sum(math_ops.square(x), axes, keepdims=keep)
        return count, m_ss, v_ss, shift


def _count(x: Tensor, axes) -> Tensor:
    """The number of elements of `x` over `axes`, as x's dtype."""
    from tfplus.ops.array_ops import gather, shape
    return math_ops.cast(math_ops.reduce_prod(gather(shape(x), list(axes))), x.dtype)


def normalize_moments(counts, mean_ss, variance_ss, shift, name=None):
    """(mean, variance) from sufficient statistics, as tf.nn.normalize_moments."""
    with name_scope(name, "normalize"):
        divisor = math_ops.reciprocal(counts)
        shifted_mean = mean_ss * divisor
        mean = shifted_mean if shift is None else shifted_mean + shift
        variance = variance_ss * divisor - math_ops.square(shifted_mean)
        return mean, variance


def weighted_moments(x, axes, frequency_weights, name=None, keep_dims=None, keepdims=None):
    """(mean, variance) of `x` over `axes`, each element counted frequency_weights times (broadcast against x),
    by TF's two passes; 0 where the weights sum to 0 (tf.nn.weighted_moments)."""
    keep = bool(keepdims if keepdims is not None else keep_dims)
    with name_scope(name, "weighted_moments"):
        x = convert_to_tensor(x)
        weights = math_ops.cast(convert_to_tensor(frequency_weights), x.dtype)
        weighted_sum = math_ops.reduce_sum(weights * x, axes, keepdims=True, name="weighted_input_sum")
        sum_of_weights = math_ops.reduce_sum(weights + zeros_like(x), axes, keepdims=True, name="sum_of_weights")
        mean = math_ops.div_no_nan(weighted_sum, sum_of_weights)
        distsq = math_ops.reduce_sum(weights * math_ops.squared_difference(x, mean), axes, keepdims=True,
                                     name="weighted_distsq")
        variance = math_ops.div_no_nan(distsq, sum_of_weights)
        if not keep:
            mean, variance = squeeze(mean, axis=axes), squeeze(variance, axis=axes)
        return mean, variance


# -- pooling of one and of N spatial dimensions (TF 1.14+'s names), by the 2-D pooling ops -----------------------
def _window(value, n: int, what: str) -> list:
    """ksize or strides (an int, or a list of 1, n or n + 2 ints) as the n spatial entries."""
    values = [int(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
    if len(values) == 1:
        return values * n
    if len(values) == n:
        return values
    if len(values) == n + 2 and values[0] == values[-1] == 1:
        return values[1:-1]
    raise ValueError(f"{what}: expected 1, {n} or {n + 2} window entries (batch and channel ones 1), got {values}")


def _pool1d(pool, what: str, input, ksize, strides, padding, data_format, name):
    if data_format not in (None, "NWC"):
        raise ValueError(f"tf.nn.{what}: data_format={data_format!r}; tfplus pools channels-last (NWC) only")
    with name_scope(name, what):
        x = expand_dims(convert_to_tensor(input), 1)
        k, s = _window(ksize, 1, f"tf.nn.{what}"), _window(strides, 1, f"tf.nn.{what}")
        return squeeze(pool(x, [1, 1, k[0], 1], [1, 1, s[0], 1], padding), [1])


def max_pool1d(input, ksize, strides, padding, data_format="NWC", name=None):
    """The maximum over each ksize window of [batch, width, channels] (tf.nn.max_pool1d)."""
    return _pool1d(nn_ops.max_pool, "max_pool1d", input, ksize, strides, padding, data_format, name)


def avg_pool1d(input, ksize, strides, padding, data_format="NWC", name=None):
    """The mean over each ksize window of [batch, width, channels] (tf.nn.avg_pool1d)."""
    return _pool1d(nn_ops.avg_pool, "avg_pool1d", input, ksize, strides, padding, data_format, name)


def _pool_nd(kind: str, input, ksize, strides, padding, data_format, name):
    x = convert_to_tensor(input)
    n = x.shape.ndims - 2 if x.shape.ndims is not None else None
    if n == 1:
        return (max_pool1d if kind == "max" else avg_pool1d)(x, ksize, strides, padding, data_format, name)
    if n == 2:
        k, s = _window(ksize, 2, f"tf.nn.{kind}_pool"), _window(strides, 2, f"tf.nn.{kind}_pool")
        pool = nn_ops.max_pool if kind == "max" else nn_ops.avg_pool
        return pool(x, [1, *k, 1], [1, *s, 1], padding, data_format or "NHWC", name)
    raise NotImplementedError(f"tf.nn.{kind}_pool: inputs of rank {x.shape.ndims}; tfplus pools 1 or 2 spatial "
                              "dimensions (rank 3 or 4): reshape the input to one of those")


def max_pool_v2(input, ksize, strides, padding, data_format=None, name=None):
    """tf.nn.max_pool_v2 (TF2's tf.nn.max_pool): the 1-D or 2-D max pool by the input's rank."""
    return _pool_nd("max", input, ksize, strides, padding, data_format, name)


def avg_pool_v2(input, ksize, strides, padding, data_format=None, name=None):
    """tf.nn.avg_pool_v2 (TF2's tf.nn.avg_pool): the 1-D or 2-D average pool by the input's rank."""
    return _pool_nd("avg", input, ksize, strides, padding, data_format, name)


def pool(input, window_shape, pooling_type, padding, dilation_rate=None, strides=None, name=None,
         data_format=None, dilations=None):
    """tf.nn.pool: "MAX" or "AVG" pooling over window_shape (1 or 2 spatial dimensions), strides default 1."""
    if pooling_type not in ("MAX", "AVG"):
        raise ValueError(f"tf.nn.pool: pooling_type={pooling_type!r}; give 'MAX' or 'AVG'")
    dilation = dilation_rate if dilation_rate is not None else dilations
    if dilation is not None and any(int(d) != 1 for d in dilation):
        raise NotImplementedError(f"tf.nn.pool: dilation_rate={list(dilation)} is not implemented in tfplus; pool "
                                  "without dilation (dilation_rate 1)")
    strides = strides if strides is not None else [1] * len(window_shape)
    return _pool_nd("max" if pooling_type == "MAX" else "avg", input, list(window_shape), list(strides), padding,
                    data_format, name)
