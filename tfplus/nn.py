"""tf.nn: the neural-network wrappers listed in tfplus.ops.nn_ops.__all__."""
from tfplus.ops import nn_ops as _nn_ops

for _n in _nn_ops.__all__:
    globals()[_n] = getattr(_nn_ops, _n)
