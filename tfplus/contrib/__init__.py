"""tf.contrib: the commonly used parts of TF1's contrib, `tf.contrib.layers` and `tf.contrib.rnn`."""
from tfplus.contrib import layers, rnn
from tfplus.unsupported import module_getattr

__all__ = ["layers", "rnn"]
__getattr__ = module_getattr(__name__, "tf.contrib")
