"""tf.contrib: the commonly used parts of TF1's contrib, `tf.contrib.layers`, `tf.contrib.rnn` and
`tf.contrib.seq2seq`'s sequence_loss."""
from tfplus.contrib import layers, rnn, seq2seq
from tfplus.unsupported import module_getattr

__all__ = ["layers", "rnn", "seq2seq"]
__getattr__ = module_getattr(__name__, "tf.contrib")
