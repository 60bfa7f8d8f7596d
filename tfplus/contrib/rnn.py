"""tf.contrib.rnn: the namespace TF1 scripts import RNN cells from (BasicLSTMCell, LSTMCell, GRUCell,
MultiRNNCell, static_rnn, ...). The cells come with the RNN work; until a name is defined here, using it
raises UnsupportedError naming it."""
from tfplus.unsupported import module_getattr

__getattr__ = module_getattr(__name__, "tf.contrib.rnn")
