"""tf.contrib.rnn: the namespace TF1 scripts import RNN cells from; the cells and drivers of tfplus.rnn
(BasicRNNCell, GRUCell, BasicLSTMCell, LSTMCell, LSTMStateTuple, MultiRNNCell, the wrappers, static_rnn,
static_bidirectional_rnn). Other names raise UnsupportedError naming them."""
from tfplus.rnn import (  # noqa: F401
    BasicLSTMCell,
    BasicRNNCell,
    DeviceWrapper,
    DropoutWrapper,
    GRUCell,
    LSTMCell,
    LSTMStateTuple,
    MultiRNNCell,
    ResidualWrapper,
    RNNCell,
    static_bidirectional_rnn,
    static_rnn,
)
from tfplus.unsupported import module_getattr

__getattr__ = module_getattr(__name__, "tf.contrib.rnn")
