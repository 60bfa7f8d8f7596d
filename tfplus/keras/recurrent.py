"""tf.keras.layers.SimpleRNN, GRU, LSTM and Bidirectional on tfplus's RNN driver (tf.nn.dynamic_rnn: unrolled
when the number of steps is known, a while loop otherwise).

Keras's weights and math, not tf.nn.rnn_cell's: `lstm/lstm_cell/kernel` (depth, 4 units), `recurrent_kernel`
(units, 4 units), `bias` (4 units, the forget gate's starting at ones), gates in the order i, f, c, o; GRU's gates
z, r, h with reset_after=False (bias (3 units)) or True (bias (2, 3 units), the reset gate applied after the
recurrent matmul). TF1's Keras defaults (tf.compat.v1.keras): recurrent activation hard_sigmoid, activation tanh,
reset_after=False.
"""
from __future__ import annotations

from tfplus.init_ops import Initializer
from tfplus.keras import activations, backend, initializers
from tfplus.keras.engine import Layer
from tfplus.ops import array_ops, composite_ops, math_ops, nn_ops
from tfplus.rnn import RNNCell, dynamic_rnn
from tfplus.variables import variable_scope

__all__ = ["SimpleRNN", "GRU", "LSTM", "Bidirectional"]


class _ForgetBiasOnes(Initializer):
    """Keras's unit_forget_bias: the LSTM bias from `init`, but ones for the forget gate's units."""

    def __init__(self, init, units: int):
        self.init, self.units = init, units

    def __call__(self, shape, dtype=None, partition_info=None):
        u = self.units
        return array_ops.concat([self.init([u], dtype), array_ops.ones([u], dtype=dtype), self.init([2 * u], dtype)],
                                0)


class _Cell(RNNCell):
    """A Keras RNN layer's step as a tf.nn RNN cell (its weights are the layer's, made in its build)."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    @property
    def state_size(self):
        return (self.layer.units,) * self.layer._n_states

    @property
    def output_size(self) -> int:
        return self.layer.units

    def __call__(self, inputs, state, scope=None):
        return self.layer._step(inputs, state)


class _Recurrent(Layer):
    _gates = 1
    _n_states = 1

    def __init__(self, units, activation="tanh", recurrent_activation="hard_sigmoid", use_bias=True,
                 kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal", bias_initializer="zeros",
                 unit_forget_bias=True, kernel_regularizer=None, recurrent_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, recurrent_constraint=None, bias_constraint=None,
                 dropout=0.0, recurrent_dropout=0.0, return_sequences=False, return_state=False,
                 go_backwards=False, stateful=False, unroll=False, time_major=False, reset_after=False,
                 implementation=2, **kwargs):
        given = dict(locals())
        self._init_args = {k: v for k, v in given.items() if k not in ("self", "kwargs", "__class__")}
        self._init_args.update({k: v for k, v in kwargs.items() if k != "name"})
        unsupported = {"dropout": dropout, "recurrent_dropout": recurrent_dropout, "stateful": stateful,
                       "activity_regularizer": activity_regularizer, "kernel_constraint": kernel_constraint,
                       "recurrent_constraint": recurrent_constraint, "bias_constraint": bias_constraint,
                       "time_major": time_major}
        bad = sorted(k for k, v in unsupported.items() if v)
        if bad:
            raise NotImplementedError(f"tf.keras.layers.{type(self).__name__}: {', '.join(bad)} not supported by "
                                      "tfplus")
        super().__init__(**kwargs)
        self.units = units
        self.activation, self.recurrent_activation = activations.get(activation), activations.get(recurrent_activation)
        self.use_bias, self.unit_forget_bias, self.reset_after = use_bias, unit_forget_bias, reset_after
        self.kernel_initializer, self.recurrent_initializer = kernel_initializer, recurrent_initializer
        self.bias_initializer = bias_initializer
        self.kernel_regularizer, self.recurrent_regularizer = kernel_regularizer, recurrent_regularizer
        self.bias_regularizer = bias_regularizer
        self.return_sequences, self.return_state, self.go_backwards = return_sequences, return_state, go_backwards
        self.cell_name = backend.to_snake_case(type(self).__name__) + "_cell"

    def _bias_shape(self) -> tuple:
        return (self._gates * self.units,)

    def _bias_initializer(self):
        return self.bias_initializer

    def build(self, input_shape):
        depth = input_shape.as_list()[-1]
        if depth is None:
            raise ValueError(f"tf.keras.layers.{type(self).__name__} '{self.name}': the last dimension of the inputs "
                             f"(shape {input_shape}) must be known")
        n = self._gates * self.units
        with variable_scope(self.cell_name):
            self.kernel = self.add_weight("kernel", (depth, n), initializer=self.kernel_initializer,
                                          regularizer=self.kernel_regularizer)
            self.recurrent_kernel = self.add_weight("recurrent_kernel", (self.units, n),
                                                    initializer=self.recurrent_initializer,
                                                    regularizer=self.recurrent_regularizer)
            self.bias = self.add_weight("bias", self._bias_shape(), initializer=self._bias_initializer(),
                                        regularizer=self.bias_regularizer) if self.use_bias else None
        self.built = True

    def call(self, inputs, initial_state=None):
        x = composite_ops.reverse(inputs, [1]) if self.go_backwards else inputs
        if initial_state is not None:
            initial_state = tuple(initial_state) if isinstance(initial_state, (list, tuple)) else (initial_state,)
        outputs, state = dynamic_rnn(_Cell(self), x, initial_state=initial_state, dtype=x.dtype)
        out = outputs if self.return_sequences else state[0]  # the last output is the last h
        return [out, *state] if self.return_state else out

    def _step(self, x, state):
        raise NotImplementedError

    def _attribute_path(self, relative: str) -> str:
        return "cell/" + relative.split("/", 1)[1]


class SimpleRNN(_Recurrent):
    """h = activation(x kernel + bias + h recurrent_kernel)."""

    def __init__(self, units, activation="tanh", use_bias=True, kernel_initializer="glorot_uniform",
                 recurrent_initializer="orthogonal", bias_initializer="zeros", **kwargs):
        for key in ("recurrent_activation", "unit_forget_bias", "reset_after", "implementation"):
            if key in kwargs:
                raise TypeError(f"tf.keras.layers.SimpleRNN: unknown argument {key!r}")
        super().__init__(units, activation=activation, use_bias=use_bias, kernel_initializer=kernel_initializer,
                         recurrent_initializer=recurrent_initializer, bias_initializer=bias_initializer, **kwargs)

    def _step(self, x, state):
        (h,) = state
        z = math_ops.matmul(x, self.kernel)
        if self.bias is not None:
            z = nn_ops.bias_add(z, self.bias)
        h = self.activation(z + math_ops.matmul(h, self.recurrent_kernel))
        return h, (h,)


class GRU(_Recurrent):
    """z, r = recurrent_activation(x Wz,r + h Uz,r + b); h' = z h + (1 - z) tanh(x Wh + (r h) Uh + b)
    (reset_after: tanh(x Wh + r (h Uh + b_rec) + b_in))."""
    _gates = 3

    def _bias_shape(self) -> tuple:
        return (2, 3 * self.units) if self.reset_after else (3 * self.units,)

    def _step(self, x, state):
        (h,) = state
        u = self.units
        mx = math_ops.matmul(x, self.kernel)
        b_in, b_rec = (array_ops.unstack(self.bias) if self.reset_after else (self.bias, None)) \
            if self.bias is not None else (None, None)
        if b_in is not None:
            mx = nn_ops.bias_add(mx, b_in)
        xz, xr, xh = array_ops.split(mx, 3, axis=1)
        if self.reset_after:
            mh = math_ops.matmul(h, self.recurrent_kernel)
            if b_rec is not None:
                mh = nn_ops.bias_add(mh, b_rec)
            hz, hr, hh = array_ops.split(mh, 3, axis=1)
            z = self.recurrent_activation(xz + hz)
            r = self.recurrent_activation(xr + hr)
            cand = self.activation(xh + r * hh)
        else:
            zr = math_ops.matmul(h, self.recurrent_kernel[:, :2 * u])
            hz, hr = array_ops.split(zr, 2, axis=1)
            z = self.recurrent_activation(xz + hz)
            r = self.recurrent_activation(xr + hr)
            cand = self.activation(xh + math_ops.matmul(r * h, self.recurrent_kernel[:, 2 * u:]))
        h = z * h + (1.0 - z) * cand
        return h, (h,)


class LSTM(_Recurrent):
    """i, f, o = sigmoid(.), c' = f c + i tanh(.), h' = o tanh(c') of z = x kernel + h recurrent_kernel + bias
    split in four (i, f, c, o); the state is [h, c]."""
    _gates = 4
    _n_states = 2

    def _bias_initializer(self):
        if not self.unit_forget_bias:
            return self.bias_initializer
        return _ForgetBiasOnes(initializers.get(self.bias_initializer), self.units)

    def _step(self, x, state):
        h, c = state
        z = math_ops.matmul(x, self.kernel) + math_ops.matmul(h, self.recurrent_kernel)
        if self.bias is not None:
            z = nn_ops.bias_add(z, self.bias)
        i, f, g, o = array_ops.split(z, 4, axis=1)
        c = self.recurrent_activation(f) * c + self.recurrent_activation(i) * self.activation(g)
        h = self.recurrent_activation(o) * self.activation(c)
        return h, (h, c)


class Bidirectional(Layer):
    """`layer` run forwards and backwards (copies named forward_<name>, backward_<name>), the outputs merged:
    'concat' (default), 'sum', 'mul', 'ave', or None for the pair."""

    def __init__(self, layer, merge_mode="concat", weights=None, backward_layer=None, **kwargs):
        if not isinstance(layer, _Recurrent):
            raise TypeError(f"tf.keras.layers.Bidirectional: expects a SimpleRNN, GRU or LSTM, got {layer!r}")
        if backward_layer is not None or weights is not None or layer.return_state:
            raise NotImplementedError("tf.keras.layers.Bidirectional: backward_layer, weights and return_state are "
                                      "not supported by tfplus")
        if merge_mode not in ("concat", "sum", "mul", "ave", None):
            raise ValueError(f"tf.keras.layers.Bidirectional: unknown merge_mode {merge_mode!r}")
        super().__init__(**kwargs)
        args = layer._init_args
        self.forward_layer = type(layer)(**args, name="forward_" + layer.name)
        self.backward_layer = type(layer)(**{**args, "go_backwards": not args["go_backwards"]},
                                          name="backward_" + layer.name)
        self.merge_mode, self.return_sequences = merge_mode, layer.return_sequences

    def _attribute_path(self, relative: str) -> str:
        first, rest = relative.split("/", 1)
        layer = self.forward_layer if first == self.forward_layer.name else self.backward_layer
        return f"{first.split('_', 1)[0]}_layer/{layer._attribute_path(rest)}"

    def call(self, inputs):
        fwd = self.forward_layer(inputs)
        bwd = self.backward_layer(inputs)
        if self.return_sequences:
            bwd = composite_ops.reverse(bwd, [1])
        if self.merge_mode == "concat":
            return array_ops.concat([fwd, bwd], -1)
        if self.merge_mode == "sum":
            return fwd + bwd
        if self.merge_mode == "mul":
            return fwd * bwd
        if self.merge_mode == "ave":
            return (fwd + bwd) / 2.0
        return [fwd, bwd]
