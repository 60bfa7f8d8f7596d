"""tf.contrib.rnn: the namespace TF1 scripts import RNN cells from; the cells and drivers of tfplus.rnn
(BasicRNNCell, GRUCell, BasicLSTMCell, LSTMCell, LSTMStateTuple, MultiRNNCell, the wrappers, static_rnn,
static_bidirectional_rnn) and contrib's stack_bidirectional_dynamic_rnn. Other names raise UnsupportedError naming
them."""
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


def stack_bidirectional_dynamic_rnn(cells_fw, cells_bw, inputs, initial_states_fw=None, initial_states_bw=None,
                                    dtype=None, sequence_length=None, parallel_iterations=None, time_major=False,
                                    scope=None, swap_memory=False):
    """Bidirectional layers stacked: layer i (variable scope `cell_<i>` under `stack_bidirectional_rnn`) runs
    tf.nn.bidirectional_dynamic_rnn on the concatenated outputs of layer i - 1. Returns (the last layer's
    concatenated outputs, the forward final states, the backward final states), as TF1's contrib."""
    from tfplus.ops.array_ops import concat
    from tfplus.rnn import bidirectional_dynamic_rnn
    from tfplus.variables import variable_scope
    if not cells_fw or len(cells_fw) != len(cells_bw):
        raise ValueError(f"stack_bidirectional_dynamic_rnn: cells_fw and cells_bw must be non-empty lists of one "
                         f"length, got {len(cells_fw or ())} and {len(cells_bw or ())}")
    states_fw, states_bw = [], []
    layer = inputs
    with variable_scope(scope or "stack_bidirectional_rnn"):
        for i, (cell_fw, cell_bw) in enumerate(zip(cells_fw, cells_bw)):
            with variable_scope("cell_%d" % i):
                outputs, (state_fw, state_bw) = bidirectional_dynamic_rnn(
                    cell_fw, cell_bw, layer, sequence_length=sequence_length,
                    initial_state_fw=initial_states_fw[i] if initial_states_fw else None,
                    initial_state_bw=initial_states_bw[i] if initial_states_bw else None, dtype=dtype,
                    parallel_iterations=parallel_iterations, swap_memory=swap_memory, time_major=time_major)
                layer = concat(outputs, 2)
            states_fw.append(state_fw)
            states_bw.append(state_bw)
    return layer, tuple(states_fw), tuple(states_bw)


__getattr__ = module_getattr(__name__, "tf.contrib.rnn")
