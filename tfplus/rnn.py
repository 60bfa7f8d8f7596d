"""TF1's recurrent networks: tf.nn.rnn_cell's cells and tf.nn.static_rnn / dynamic_rnn /
bidirectional_dynamic_rnn, built from registered ops (MatMul, BiasAdd, Sigmoid, Tanh, ConcatV2, Split), so
their gradients, kernels and plans come for free.

    import tfplus as tf
    x = tf.placeholder(tf.float32, [None, 32, 96])                  # batch-major: (batch, time, features)
    cell = tf.nn.rnn_cell.GRUCell(64)
    outputs, state = tf.nn.dynamic_rnn(cell, x, dtype=tf.float32)   # (batch, 32, 64), (batch, 64)
    # variables rnn/gru_cell/gates/kernel (96 + 64, 128), gates/bias, candidate/kernel (160, 64), candidate/bias

Variable names, shapes and weight layouts are TF1's (tests/ops/test_rnn.py checks them, the outputs and the
gradients against TensorFlow). A cell creates its variables on its first call, under the variable scope it is
called in plus its own name (`gru_cell`, `gru_cell_1`, ... as TF1 numbers them); later calls share them.

dynamic_rnn unrolls the time loop when the number of steps is known when the graph is built (each step is a few
ops in the graph; no loop-variable history) and runs a tf.while_loop otherwise: benchmarks/bench_rnn_unroll.py
measures a 32-step GRU's training step ~2.5x faster unrolled on the cpu device, ~2x on opencl.
"""
from __future__ import annotations

import hashlib
import re
from typing import NamedTuple

from tfplus import dtypes as _dt
from tfplus.framework import Tensor, convert_to_tensor, name_scope
from tfplus.init_ops import Constant, zeros_initializer
from tfplus.ops import array_ops, composite_ops, math_ops, nn_ops, random_ops
from tfplus.ops.control_flow_ops import TensorArray, while_loop
from tfplus.tensor_shape import TensorShape
from tfplus.variables import get_variable, variable_scope

__all__ = ["RNNCell", "BasicRNNCell", "GRUCell", "BasicLSTMCell", "LSTMCell", "LSTMStateTuple", "MultiRNNCell",
           "DropoutWrapper", "ResidualWrapper", "DeviceWrapper", "static_rnn", "dynamic_rnn",
           "bidirectional_dynamic_rnn", "static_bidirectional_rnn"]


class LSTMStateTuple(NamedTuple):
    """An LSTM's state: the cell state c and the output h, each (batch, num_units)."""
    c: Tensor
    h: Tensor

    @property
    def dtype(self):
        return self.c.dtype


def _flatten(s) -> list:
    return [t for x in s for t in _flatten(x)] if isinstance(s, (tuple, list)) else [s]


def _pack(structure, flat: list):
    """`flat` in the nesting of `structure` (tuples, LSTMStateTuples)."""
    it = iter(flat)

    def build(s):
        if isinstance(s, (tuple, list)):
            items = [build(x) for x in s]
            return type(s)(*items) if hasattr(s, "_fields") else type(s)(items)
        return next(it)
    return build(structure)


class RNNCell:
    """The base of the cells: `output, new_state = cell(inputs, state)` with inputs (batch, depth)."""
    _default_name = "rnn_cell"

    def __init_subclass__(cls, **kwargs):
        # A cell of one's own is named after its class, as TF's layers are (MinimalGRUCell: minimal_gru_cell).
        super().__init_subclass__(**kwargs)
        if "_default_name" not in cls.__dict__:
            cls._default_name = re.sub("([a-z])([A-Z])", r"\1_\2",
                                       re.sub("(.)([A-Z][a-z0-9]+)", r"\1_\2", cls.__name__)).lower()

    def __init__(self, name=None, dtype=None, reuse=None, trainable=True, _reuse=None):
        # `_reuse`: TF1's cells of one's own pass reuse on as super().__init__(_reuse=reuse).
        self._name, self._reuse, self._scope, self._built = name, reuse or _reuse, None, False

    @property
    def state_size(self):
        raise NotImplementedError

    @property
    def output_size(self) -> int:
        raise NotImplementedError

    def zero_state(self, batch_size, dtype):
        """Zeros in the structure of state_size, each (batch_size, n), or (batch_size, *n) for a TensorShape n
        (a convolutional cell's)."""
        from tfplus.tensor_shape import TensorShape
        static = batch_size if isinstance(batch_size, int) else None
        with name_scope(f"{type(self).__name__}ZeroState"):
            dims = [n.as_list() if isinstance(n, TensorShape) else [n] for n in _flatten(self.state_size)]
            zeros = [array_ops.zeros(array_ops.stack([batch_size] + d), dtype) for d in dims]
            for z, d in zip(zeros, dims):
                z.set_shape([static] + d)
            return _pack(self.state_size, zeros)

    def __call__(self, inputs, state, scope=None):
        inputs = convert_to_tensor(inputs)
        if self._scope is None:  # first call: the variables' scope, numbered as TF1 numbers layers
            with variable_scope(scope or self._name, default_name=self._default_name, reuse=self._reuse) as vs:
                self._scope = vs
        with variable_scope(self._scope, reuse=True if self._built else self._reuse):
            if not self._built:
                depth = inputs.shape.as_list()[-1]
                if depth is None:
                    raise ValueError(f"{type(self).__name__}: the last dimension of the inputs ('{inputs.name}', "
                                     f"shape {inputs.shape}) must be known")
                self._input_dtype = inputs.dtype
                self.build(inputs.shape)
                self._built = True
            return self.call(inputs, state)

    def build(self, inputs_shape) -> None:
        """TF's hook for the cell's variables, called once with the inputs' shape: a cell of one's own may override
        it (with add_variable) or make its variables with tf.get_variable in call; tfplus's make theirs here."""
        self._make_variables(inputs_shape.as_list()[-1], self._input_dtype)

    def _make_variables(self, depth: int, dtype) -> None:
        pass

    def add_variable(self, name, shape, dtype=None, initializer=None, trainable=True):
        """TF's Layer.add_variable (add_weight) for cells of one's own: a variable in the cell's scope."""
        return get_variable(name, shape, dtype or self._input_dtype, initializer=initializer, trainable=trainable)

    add_weight = add_variable

    def call(self, inputs, state):
        raise NotImplementedError


def _linear(inputs, state, kernel, bias):
    """concat([inputs, state], 1) @ kernel + bias: TF1's layout (the input's rows, then the state's)."""
    return nn_ops.bias_add(math_ops.matmul(array_ops.concat([inputs, state], 1), kernel), bias)


class BasicRNNCell(RNNCell):
    """h' = activation([x, h] @ kernel + bias); variables basic_rnn_cell/kernel (depth + n, n), bias (n)."""
    _default_name = "basic_rnn_cell"

    def __init__(self, num_units, activation=None, reuse=None, name=None, dtype=None):
        super().__init__(name, dtype, reuse)
        self._num_units, self._activation = num_units, activation or nn_ops.tanh

    state_size = output_size = property(lambda self: self._num_units)

    def _make_variables(self, depth, dtype):
        n = self._num_units
        self._kernel = get_variable("kernel", [depth + n, n], dtype)
        self._bias = get_variable("bias", [n], dtype, initializer=zeros_initializer())

    def call(self, inputs, state):
        h = self._activation(_linear(inputs, state, self._kernel, self._bias))
        return h, h


class GRUCell(RNNCell):
    """TF1's GRU (Cho et al. 2014): r, u = split(sigmoid([x, h] @ gates/kernel + gates/bias));
    c = activation([x, r * h] @ candidate/kernel + candidate/bias); h' = u * h + (1 - u) * c.
    The gates' bias starts at 1 (TF1's default): the cell begins by mostly keeping its state."""
    _default_name = "gru_cell"

    def __init__(self, num_units, activation=None, reuse=None, kernel_initializer=None, bias_initializer=None,
                 name=None, dtype=None):
        super().__init__(name, dtype, reuse)
        self._num_units, self._activation = num_units, activation or nn_ops.tanh
        self._kernel_init, self._bias_init = kernel_initializer, bias_initializer

    state_size = output_size = property(lambda self: self._num_units)

    def _make_variables(self, depth, dtype):
        n = self._num_units
        self._gate_kernel = get_variable("gates/kernel", [depth + n, 2 * n], dtype, initializer=self._kernel_init)
        self._gate_bias = get_variable("gates/bias", [2 * n], dtype, initializer=self._bias_init or Constant(1.0))
        self._cand_kernel = get_variable("candidate/kernel", [depth + n, n], dtype, initializer=self._kernel_init)
        self._cand_bias = get_variable("candidate/bias", [n], dtype,
                                       initializer=self._bias_init or zeros_initializer())

    def call(self, inputs, state):
        r, u = array_ops.split(nn_ops.sigmoid(_linear(inputs, state, self._gate_kernel, self._gate_bias)), 2, 1)
        c = self._activation(_linear(inputs, math_ops.multiply(r, state), self._cand_kernel, self._cand_bias))
        # u * h + (1 - u) * c written as c + u * (h - c): one op fewer per step, and one Mul gradient fewer.
        h = math_ops.add(c, math_ops.multiply(u, math_ops.subtract(state, c)))
        return h, h


class BasicLSTMCell(RNNCell):
    """TF1's LSTM: i, j, f, o = split([x, h] @ kernel + bias, 4); c' = c * sigmoid(f + forget_bias) +
    sigmoid(i) * activation(j); h' = activation(c') * sigmoid(o). Variables basic_lstm_cell/kernel
    (depth + n, 4n), bias (4n). The state is LSTMStateTuple(c, h), or concat([c, h], 1) with
    state_is_tuple=False."""
    _default_name = "basic_lstm_cell"

    def __init__(self, num_units, forget_bias=1.0, state_is_tuple=True, activation=None, reuse=None, name=None,
                 dtype=None):
        super().__init__(name, dtype, reuse)
        self._num_units, self._forget_bias = num_units, float(forget_bias)
        self._tuple, self._activation = state_is_tuple, activation or nn_ops.tanh

    @property
    def state_size(self):
        n = self._num_units
        return LSTMStateTuple(n, n) if self._tuple else 2 * n

    output_size = property(lambda self: self._num_units)

    def _make_variables(self, depth, dtype):
        n = self._num_units
        self._kernel = get_variable("kernel", [depth + n, 4 * n], dtype)
        self._bias = get_variable("bias", [4 * n], dtype, initializer=zeros_initializer())

    def call(self, inputs, state):
        c, h = state if self._tuple else array_ops.split(state, 2, 1)
        i, j, f, o = array_ops.split(_linear(inputs, h, self._kernel, self._bias), 4, 1)
        act = self._activation
        forget = nn_ops.sigmoid(math_ops.add(f, convert_to_tensor(self._forget_bias, dtype=f.dtype)))
        new_c = math_ops.add(math_ops.multiply(c, forget), math_ops.multiply(nn_ops.sigmoid(i), act(j)))
        new_h = math_ops.multiply(act(new_c), nn_ops.sigmoid(o))
        return new_h, (LSTMStateTuple(new_c, new_h) if self._tuple else array_ops.concat([new_c, new_h], 1))


class LSTMCell(BasicLSTMCell):
    """TF1's LSTMCell: BasicLSTMCell's arithmetic with variables lstm_cell/kernel and lstm_cell/bias and an
    `initializer` for the kernel, plus TF1's options: peepholes (w_f_diag, w_i_diag, w_o_diag: the gates f and i
    see c, o sees c'), cell_clip (c' clipped to [-cell_clip, cell_clip]) and a projection of the output
    (projection/kernel (n, num_proj), then proj_clip); the state is then LSTMStateTuple(c, m) with m the
    projected output. Sharded variables (num_unit_shards, num_proj_shards) raise."""
    _default_name = "lstm_cell"

    def __init__(self, num_units, use_peepholes=False, cell_clip=None, initializer=None, num_proj=None,
                 proj_clip=None, num_unit_shards=None, num_proj_shards=None, forget_bias=1.0, state_is_tuple=True,
                 activation=None, reuse=None, name=None, dtype=None):
        bad = [k for k, v in (("num_unit_shards", num_unit_shards), ("num_proj_shards", num_proj_shards)) if v]
        if bad:
            raise NotImplementedError(f"LSTMCell: {', '.join(bad)} not supported by tfplus (unsharded variables "
                                      f"hold the same weights: leave them None)")
        super().__init__(num_units, forget_bias, state_is_tuple, activation, reuse, name, dtype)
        self._initializer, self._peepholes = initializer, bool(use_peepholes)
        self._cell_clip, self._num_proj, self._proj_clip = cell_clip, num_proj, proj_clip

    @property
    def state_size(self):
        n, p = self._num_units, self._num_proj or self._num_units
        return LSTMStateTuple(n, p) if self._tuple else n + p

    output_size = property(lambda self: self._num_proj or self._num_units)

    def _make_variables(self, depth, dtype):
        n, p = self._num_units, self._num_proj or self._num_units
        self._kernel = get_variable("kernel", [depth + p, 4 * n], dtype, initializer=self._initializer)
        self._bias = get_variable("bias", [4 * n], dtype, initializer=zeros_initializer())
        if self._peepholes:
            self._w_f, self._w_i, self._w_o = (get_variable(k, [n], dtype, initializer=self._initializer)
                                               for k in ("w_f_diag", "w_i_diag", "w_o_diag"))
        if self._num_proj is not None:
            self._proj = get_variable("projection/kernel", [n, self._num_proj], dtype, initializer=self._initializer)

    def call(self, inputs, state):
        if not (self._peepholes or self._cell_clip is not None or self._num_proj is not None):
            return super().call(inputs, state)  # BasicLSTMCell's ops: the graph the rewrite fuses
        n, p = self._num_units, self._num_proj or self._num_units
        if self._tuple:
            c, h = state
        else:
            c, h = array_ops.slice(state, [0, 0], [-1, n]), array_ops.slice(state, [0, n], [-1, p])
        i, j, f, o = array_ops.split(_linear(inputs, h, self._kernel, self._bias), 4, 1)
        act, sig = self._activation, nn_ops.sigmoid
        fb = convert_to_tensor(self._forget_bias, dtype=f.dtype)
        if self._peepholes:  # TF1's order of the sums
            f = math_ops.add(math_ops.add(f, fb), math_ops.multiply(self._w_f, c))
            i = math_ops.add(i, math_ops.multiply(self._w_i, c))
        else:
            f = math_ops.add(f, fb)
        # BasicLSTMCell's ops (products in its order: the same values as TF1's), so that a projected cell's core
        # is the graph the rewrite recognizes.
        new_c = math_ops.add(math_ops.multiply(c, sig(f)), math_ops.multiply(sig(i), act(j)))
        if self._cell_clip is not None:
            new_c = math_ops.clip_by_value(new_c, -self._cell_clip, self._cell_clip)
        if self._peepholes:
            o = math_ops.add(o, math_ops.multiply(self._w_o, new_c))
        m = math_ops.multiply(act(new_c), sig(o))
        if self._num_proj is not None:
            m = math_ops.matmul(m, self._proj)
            if self._proj_clip is not None:
                m = math_ops.clip_by_value(m, -self._proj_clip, self._proj_clip)
        return m, (LSTMStateTuple(new_c, m) if self._tuple else array_ops.concat([new_c, m], 1))


class MultiRNNCell(RNNCell):
    """Cells stacked: each one's output is the next one's input; the state is a tuple of theirs. Variables
    multi_rnn_cell/cell_<k>/<cell's name>/..."""
    _default_name = "multi_rnn_cell"

    def __init__(self, cells, state_is_tuple=True):
        super().__init__()
        if not cells:
            raise ValueError("MultiRNNCell: needs at least one cell")
        if not state_is_tuple:
            raise NotImplementedError("MultiRNNCell(state_is_tuple=False) is not supported by tfplus")
        self._cells = list(cells)

    state_size = property(lambda self: tuple(c.state_size for c in self._cells))
    output_size = property(lambda self: self._cells[-1].output_size)

    def call(self, inputs, state):
        x, new = inputs, []
        for k, (cell, s) in enumerate(zip(self._cells, state)):
            with variable_scope(f"cell_{k}"):
                x, s = cell(x, s)
            new.append(s)
        return x, tuple(new)


class _Wrapper(RNNCell):
    """A cell around a cell, which it calls in the caller's scope (its variables keep the wrapped cell's names, as
    TF1's wrappers do); its state and output are the wrapped cell's."""

    def __init__(self, cell):
        super().__init__()
        self.cell = cell

    state_size = property(lambda self: self.cell.state_size)
    output_size = property(lambda self: self.cell.output_size)

    def zero_state(self, batch_size, dtype):
        return self.cell.zero_state(batch_size, dtype)


def _keep(p, what: str):
    """A keep probability: None where it is the Python number 1 (no dropout), else the number or tensor."""
    if isinstance(p, (int, float)):
        if not 0.0 < p <= 1.0:
            raise ValueError(f"DropoutWrapper: {what} must be in (0, 1], got {p}")
        return None if p == 1 else float(p)
    return p


class DropoutWrapper(_Wrapper):
    """TF1's tf.nn.rnn_cell.DropoutWrapper: dropout on the cell's inputs, outputs and state, each with its keep
    probability (a number or a scalar tensor, e.g. a placeholder fed 1.0 at evaluation). As TF1, state dropout
    leaves an LSTMStateTuple's c alone. A fresh mask is drawn at every step; with variational_recurrent=True, one
    mask of each (drawn here, [1, size]: the batch's examples share it, as TF1's) serves every step, and the inputs'
    depth `input_size` and the noise's `dtype` must be given."""

    def __init__(self, cell, input_keep_prob=1.0, output_keep_prob=1.0, state_keep_prob=1.0,
                 variational_recurrent=False, input_size=None, dtype=None, seed=None,
                 dropout_state_filter_visitor=None):
        if dropout_state_filter_visitor is not None:
            raise NotImplementedError("DropoutWrapper: dropout_state_filter_visitor is not supported by tfplus; "
                                      "state dropout leaves an LSTM's c alone, as TF1's default filter")
        super().__init__(cell)
        self._in, self._out = _keep(input_keep_prob, "input_keep_prob"), _keep(output_keep_prob, "output_keep_prob")
        self._state, self._seed = _keep(state_keep_prob, "state_keep_prob"), seed
        self._noise: dict[str, list[Tensor]] = {}  # variational masks' uniform noise, per leaf of what it drops
        if not variational_recurrent:
            return
        if dtype is None:
            raise ValueError("DropoutWrapper: variational_recurrent=True needs the dtype of its noise")
        for what, keep, size in (("input", self._in, input_size), ("state", self._state, cell.state_size),
                                 ("output", self._out, cell.output_size)):
            if keep is None:
                continue
            if size is None:
                raise ValueError("DropoutWrapper: variational_recurrent=True with input_keep_prob < 1 needs "
                                 "input_size (the depth of the cell's inputs)")
            self._noise[what] = [random_ops.random_uniform([1, *_dims(s)], dtype=dtype, seed=self._gen_seed(what, i))
                                 for i, s in enumerate(_leaves(size))]

    def _gen_seed(self, what: str, index: int):
        """TF1's seed of a variational mask: the wrapper's seed salted with what it drops and the leaf's index."""
        if self._seed is None:
            return None
        return int(hashlib.md5(f"{self._seed}{what}_{index}".encode()).hexdigest()[:8], 16) & 0x7FFFFFFF

    def _drop(self, x, keep, what: str, index: int = 0):
        if keep is None:
            return x
        if what in self._noise:  # keep + U[0, 1) floors to 1 with probability keep
            return math_ops.divide(x, keep) * math_ops.floor(keep + self._noise[what][index])
        return nn_ops.dropout(x, keep_prob=keep, seed=self._seed)

    def __call__(self, inputs, state, scope=None):
        output, new_state = self.cell(self._drop(convert_to_tensor(inputs), self._in, "input"), state, scope=scope)
        if self._state is not None:
            new_state = self._drop_state(new_state, iter(range(len(_leaves(new_state)))))
        return self._drop(output, self._out, "output"), new_state

    def _drop_state(self, state, index):
        """`state` with its leaves dropped; `index` counts the leaves (a variational mask's)."""
        if isinstance(state, LSTMStateTuple):
            next(index)  # c
            return LSTMStateTuple(state.c, self._drop(state.h, self._state, "state", next(index)))
        if isinstance(state, (tuple, list)):
            return type(state)(self._drop_state(s, index) for s in state)
        return self._drop(state, self._state, "state", next(index))


def _leaves(size) -> list:
    """The leaves of a (nested tuple) state size or state, as TF1's nest sees them: ints, TensorShapes or tensors."""
    if isinstance(size, (tuple, list)):
        return [leaf for s in size for leaf in _leaves(s)]
    return [size]


def _dims(size) -> list:
    """A state or input size's dims: an int is one."""
    return [size] if isinstance(size, int) else list(TensorShape(size).as_list())


class ResidualWrapper(_Wrapper):
    """TF1's tf.nn.rnn_cell.ResidualWrapper: output = inputs + cell output (or residual_fn(inputs, output))."""

    def __init__(self, cell, residual_fn=None):
        super().__init__(cell)
        self._residual_fn = residual_fn or math_ops.add

    def __call__(self, inputs, state, scope=None):
        inputs = convert_to_tensor(inputs)
        output, new_state = self.cell(inputs, state, scope=scope)
        return self._residual_fn(inputs, output), new_state


class DeviceWrapper(_Wrapper):
    """TF1's tf.nn.rnn_cell.DeviceWrapper: the cell's ops on `device`."""

    def __init__(self, cell, device):
        super().__init__(cell)
        self._device = device

    def __call__(self, inputs, state, scope=None):
        from tfplus.framework import device
        with device(self._device):
            return self.cell(inputs, state, scope=scope)


def _initial_state(cell, initial_state, batch_size, dtype):
    if initial_state is not None:
        return initial_state
    if dtype is None:
        raise ValueError("an RNN needs either initial_state or dtype")
    return cell.zero_state(batch_size, _dt.as_dtype(dtype))


def _masked(step, mask, new, old):
    """new where step < sequence_length (mask is (batch, 1) 0/1), else old: TF1 copies the state through and
    emits zeros after a sequence's end."""
    if mask is None:
        return new
    return _pack(new, [math_ops.add(_rows(mask, n), _rows(math_ops.subtract(1.0, mask), o))
                       for n, o in zip(_flatten(new), _flatten(old))])


def _rows(mask, x):
    """mask (batch, 1) times x (batch, ...) row by row, whatever x's rank (a convolutional cell's (batch, h, w,
    c) state)."""
    rank = x.shape.ndims
    if rank is not None and rank > 2:
        mask = array_ops.reshape(mask, [-1] + [1] * (rank - 1))
    return math_ops.multiply(mask, x)


def _step_mask(sequence_length, t, dtype):
    if sequence_length is None:
        return None
    return array_ops.expand_dims(math_ops.cast(math_ops.less(t, sequence_length), dtype), 1)


def static_rnn(cell, inputs, initial_state=None, dtype=None, sequence_length=None, scope=None):
    """TF1's tf.nn.static_rnn: `inputs` a list of (batch, depth) tensors, one per step; returns (outputs, the
    final state). With sequence_length, outputs past a sequence's end are zeros and its state stops there."""
    if not inputs:
        raise ValueError("static_rnn: inputs must be a non-empty list of (batch, depth) tensors")
    inputs = [convert_to_tensor(x) for x in inputs]
    with variable_scope(scope or "rnn"):
        state = _initial_state(cell, initial_state, array_ops.shape(inputs[0])[0], dtype)
        seq = None if sequence_length is None else math_ops.cast(sequence_length, _dt.int32)
        outputs = []
        for t, x in enumerate(inputs):
            out, new = cell(x, state)
            mask = _step_mask(seq, t, out.dtype)
            state = _masked(t, mask, new, state)
            outputs.append(out if mask is None else _rows(mask, out))
        return outputs, state


def dynamic_rnn(cell, inputs, sequence_length=None, initial_state=None, dtype=None, parallel_iterations=None,
                swap_memory=False, time_major=False, scope=None):
    """TF1's tf.nn.dynamic_rnn: inputs (batch, time, depth), or (time, batch, depth) with time_major; returns
    (outputs in the same major order, the final state). Unrolled when the time dimension is known, a
    tf.while_loop otherwise."""
    x = convert_to_tensor(inputs)
    if x.shape.ndims is None or x.shape.ndims < 3:
        raise ValueError(f"dynamic_rnn: inputs '{x.name}' must be rank 3 or more (batch, time, depth...), got "
                         f"{x.shape}")
    swap = [1, 0] + list(range(2, x.shape.ndims))  # batch and time (a convolutional cell's frames keep h, w, c)
    with variable_scope(scope or "rnn"):
        xt = x if time_major else array_ops.transpose(x, swap)
        steps = xt.shape.as_list()[0]
        if steps is not None:
            outs, state = static_rnn(cell, array_ops.unstack(xt, steps), initial_state, dtype, sequence_length,
                                     scope=_current_scope())
            yt = array_ops.stack(outs)
        else:
            yt, state = _while_rnn(cell, xt, initial_state, dtype, sequence_length)
        return (yt if time_major else array_ops.transpose(yt, [1, 0] + list(range(2, yt.shape.ndims)))), state


def _current_scope():
    """The current variable scope, to re-enter it (so static_rnn does not add another 'rnn' level)."""
    from tfplus.variables import get_variable_scope
    return get_variable_scope()


def _while_rnn(cell, xt, initial_state, dtype, sequence_length):
    batch = xt.shape.as_list()[1]  # static when known: the zero state, and so the final one, keep it (as TF1's)
    state = _initial_state(cell, initial_state, array_ops.shape(xt)[1] if batch is None else batch, dtype)
    seq = None if sequence_length is None else math_ops.cast(sequence_length, _dt.int32)
    steps = array_ops.shape(xt)[0]
    # Build the variables outside the loop (one step on the first input), so the loop body only reads them.
    out0, _ = cell(array_ops.gather(xt, 0), state)
    outputs = TensorArray(out0.dtype, size=steps, element_shape=array_ops.shape(out0))
    flat = _flatten(state)

    def body(t, out_ta, *s):
        st = _pack(state, list(s))
        out, new = cell(array_ops.gather(xt, t), st)
        mask = _step_mask(seq, t, out.dtype)
        new = _masked(t, mask, new, st)
        out = out if mask is None else _rows(mask, out)
        return (math_ops.add(t, 1), out_ta.write(t, out)) + tuple(_flatten(new))
    final = while_loop(lambda t, *_: math_ops.less(t, steps), body, (convert_to_tensor(0), outputs) + tuple(flat),
                       return_same_structure=True)
    outs = final[1].stack()
    outs.set_shape([None, xt.shape.as_list()[1]] + out0.shape.as_list()[1:])
    return outs, _pack(state, list(final[2:]))


def _reverse_time(xt, sequence_length):
    """xt (time, batch, ...) with each sequence's first sequence_length steps reversed (all steps without
    sequence_length): TF1's reverse_sequence. Either way each row reads its own steps, so micro-batches split it."""
    if sequence_length is None:
        steps = array_ops.shape(xt)[0]
        y = array_ops.gather(xt, math_ops.range(steps - 1, -1, -1), axis=0)
        y.set_shape(xt.shape)
        return y
    return composite_ops.reverse_sequence(xt, sequence_length, seq_axis=0, batch_axis=1)


def bidirectional_dynamic_rnn(cell_fw, cell_bw, inputs, sequence_length=None, initial_state_fw=None,
                              initial_state_bw=None, dtype=None, parallel_iterations=None, swap_memory=False,
                              time_major=False, scope=None):
    """TF1's tf.nn.bidirectional_dynamic_rnn: ((outputs_fw, outputs_bw), (state_fw, state_bw)); cell_bw reads
    each sequence backwards and its outputs are reversed back into input order. Variables
    bidirectional_rnn/fw/<cell>/... and bidirectional_rnn/bw/<cell>/..."""
    x = convert_to_tensor(inputs)
    with variable_scope(scope or "bidirectional_rnn"):
        with variable_scope("fw"):
            out_fw, st_fw = dynamic_rnn(cell_fw, x, sequence_length, initial_state_fw, dtype,
                                        time_major=time_major, scope=_current_scope())
        with variable_scope("bw"):
            xt = x if time_major else array_ops.transpose(x, [1, 0, 2])
            rev, st_bw = dynamic_rnn(cell_bw, _reverse_time(xt, sequence_length), sequence_length,
                                     initial_state_bw, dtype, time_major=True, scope=_current_scope())
            out_bw = _reverse_time(rev, sequence_length)
            out_bw = out_bw if time_major else array_ops.transpose(out_bw, [1, 0, 2])
    return (out_fw, out_bw), (st_fw, st_bw)


def static_bidirectional_rnn(cell_fw, cell_bw, inputs, initial_state_fw=None, initial_state_bw=None, dtype=None,
                             sequence_length=None, scope=None):
    """TF1's tf.nn.static_bidirectional_rnn: `inputs` a list of (batch, depth) tensors, one per step; returns
    (outputs, state_fw, state_bw) with each step's output concat([fw, bw], 1), cell_bw reading each sequence
    backwards (its first sequence_length steps) and its outputs put back in input order. Variables as
    bidirectional_dynamic_rnn's."""
    if not inputs:
        raise ValueError("static_bidirectional_rnn: inputs must be a non-empty list of (batch, depth) tensors")
    inputs = [convert_to_tensor(x) for x in inputs]

    def reverse(steps):
        return array_ops.unstack(_reverse_time(array_ops.stack(steps), sequence_length), len(steps))
    with variable_scope(scope or "bidirectional_rnn"):
        with variable_scope("fw"):
            out_fw, st_fw = static_rnn(cell_fw, inputs, initial_state_fw, dtype, sequence_length,
                                       scope=_current_scope())
        with variable_scope("bw"):
            rev, st_bw = static_rnn(cell_bw, reverse(inputs), initial_state_bw, dtype, sequence_length,
                                    scope=_current_scope())
        out_bw = reverse(rev)
    return [array_ops.concat([f, b], 1) for f, b in zip(out_fw, out_bw)], st_fw, st_bw


from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr(__name__, "tf.nn.rnn_cell")
