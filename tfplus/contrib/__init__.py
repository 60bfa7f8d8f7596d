"""tf.contrib: the commonly used parts of TF1's contrib, `tf.contrib.layers`, `tf.contrib.rnn`,
`tf.contrib.seq2seq`'s sequence_loss, `tf.contrib.legacy_seq2seq`'s sequence losses and
`tf.contrib.framework`'s global step and arg_scope, `tf.contrib.slim`'s layers, and `tf.contrib.lookup`'s tables."""
from tfplus import lookup
from tfplus.contrib import framework, layers, legacy_seq2seq, rnn, seq2seq, slim
from tfplus.unsupported import module_getattr

__all__ = ["framework", "layers", "legacy_seq2seq", "lookup", "rnn", "seq2seq", "slim"]
__getattr__ = module_getattr(__name__, "tf.contrib")
