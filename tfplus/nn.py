"""tf.nn: the neural-network wrappers listed in tfplus.ops.nn_ops.__all__."""
from tfplus.ops import nn_ops as _nn_ops

for _n in _nn_ops.__all__:
    globals()[_n] = getattr(_nn_ops, _n)

# TF1's composites (nn_impl.py), built from the registered ops above; missing names raise UnsupportedError.
from tfplus.nn_impl import (  # noqa: E402,F401
    avg_pool1d,
    avg_pool_v2,
    batch_normalization,
    crelu,
    l2_normalize,
    log_poisson_loss,
    log_uniform_candidate_sampler,
    max_pool1d,
    max_pool_v2,
    nce_loss,
    normalize_moments,
    pool,
    relu_layer,
    sampled_softmax_loss,
    selu,
    sigmoid_cross_entropy_with_logits,
    softsign,
    sufficient_statistics,
    swish,
    uniform_candidate_sampler,
    weighted_cross_entropy_with_logits,
    weighted_moments,
    xw_plus_b,
)
from tfplus.nn_impl import swish as silu  # noqa: E402,F401
from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr(__name__, "tf.nn")

# Ops TF1 lists under tf.nn but tfplus defines with the array and math ops.
# TF1's tf.nn.rnn_cell module and the RNN drivers (tfplus.rnn).
from tfplus import rnn as rnn_cell  # noqa: E402, F401
from tfplus.ctc import ctc_beam_search_decoder, ctc_beam_search_decoder_v2, ctc_greedy_decoder, ctc_loss, ctc_loss_v2  # noqa: E402, F401
from tfplus.ops.array_ops import embedding_lookup  # noqa: E402, F401
from tfplus.ops.composite_ops import depth_to_space, space_to_depth  # noqa: E402, F401
from tfplus.ops.math_ops import top_k  # noqa: E402, F401
from tfplus.rnn import bidirectional_dynamic_rnn, dynamic_rnn, static_bidirectional_rnn, static_rnn  # noqa: E402, F401
