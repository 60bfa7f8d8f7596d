"""Keras's layer and model machinery in TF1 graph mode: Layer, Input, the functional Model and Sequential.

A layer is named as Keras names it (`dense`, `dense_1`, ... per graph) and makes its variables on its first call
in a variable scope of that name (`dense/kernel`, `dense/bias`), sharing them on every later call. Each call
records a node (its input and output tensors), so `Model(inputs, outputs)` finds its layers by walking back from
the outputs and `model(x)` replays them on another tensor. Training (compile, fit, ...) is tfplus.keras.training's.

As TF1's Keras, the regularization losses and the batch-norm updates of Keras layers stay out of the graph's
REGULARIZATION_LOSSES and UPDATE_OPS collections: they are the layer's (and the model's) `losses` and `updates`.
"""
from __future__ import annotations

import contextlib
import inspect

import numpy as np

from tfplus.framework import GraphKeys, Tensor, convert_to_tensor, get_collection_ref, name_scope
from tfplus.keras import backend, initializers, regularizers
from tfplus.keras.training import Training
from tfplus.ops.array_ops import placeholder
from tfplus.tensor_shape import TensorShape
from tfplus.variables import get_variable, global_variables, trainable_variables, variable_scope

__all__ = ["Input", "InputLayer", "Layer", "Model", "Sequential"]


def flatten(x) -> list:
    """The tensors of a nest of lists and tuples, in order."""
    return [t for item in x for t in flatten(item)] if isinstance(x, (list, tuple)) else [x]


def _map(x, fn):
    return type(x)(_map(item, fn) for item in x) if isinstance(x, (list, tuple)) else fn(x)


def _shape_of(x):
    return _map(x, lambda t: convert_to_tensor(t).shape)


class Node:
    """One call of a layer: its inputs (as given), outputs, and the other arguments of the call."""

    def __init__(self, layer, inputs, outputs, args=(), kwargs=None):
        self.layer, self.inputs, self.outputs, self.args, self.kwargs = layer, inputs, outputs, args, kwargs or {}


class Layer:
    """The base of Keras's layers: `build(input_shape)` makes the variables (add_weight), `call(inputs)` the
    output. Constructor arguments: trainable, name, dtype, input_shape / input_dim / batch_input_shape (where
    a Sequential model starts)."""
    _names_ops = True  # a call's ops in a name scope of the layer's name (False: the call opens its own)

    def __init__(self, trainable=True, name=None, dtype=None, input_shape=None, batch_input_shape=None,
                 input_dim=None, batch_size=None, **kwargs):
        kwargs.pop("autocast", None)
        if kwargs:
            raise TypeError(f"tf.keras.layers.{type(self).__name__}: unknown arguments {sorted(kwargs)}")
        self.name = name or backend.unique_object_name(backend.to_snake_case(type(self).__name__))
        if input_dim is not None and input_shape is None:
            input_shape = (input_dim,)
        if batch_input_shape is None and input_shape is not None:
            batch_input_shape = (batch_size,) + tuple(input_shape)
        self._batch_input_shape = None if batch_input_shape is None else tuple(batch_input_shape)
        self.dtype = backend.dtype_of(dtype).name
        self.trainable = trainable
        self.built = False
        self._scope = None
        self._weights: list = []
        self._losses: list = []
        self._updates: list = []
        self._inbound_nodes: list[Node] = []
        self._expects_training = "training" in inspect.signature(self.call).parameters

    # -- building and calling ---------------------------------------------------------------------------------
    def build(self, input_shape) -> None:
        self.built = True

    def call(self, inputs, **kwargs):
        return inputs

    def add_weight(self, name, shape, dtype=None, initializer=None, regularizer=None, trainable=True,
                   constraint=None, **kwargs):
        """A variable `<layer scope>/<name>` (made in build), initialized by Keras's name or an initializer."""
        if constraint is not None:
            raise NotImplementedError(f"{self.name}.add_weight('{name}'): constraints are not supported by tfplus")
        return get_variable(name, list(shape), backend.dtype_of(dtype or self.dtype),
                            initializer=initializers.get(initializer or "glorot_uniform"),
                            regularizer=regularizers.get(regularizer), trainable=trainable)

    def __call__(self, inputs, *args, **kwargs):
        if self._expects_training and kwargs.get("training") is None:
            kwargs["training"] = backend.learning_phase()
        if self._scope is None:  # the first call: the layer's variable scope, unique as a default-named one
            with variable_scope(None, default_name=self.name, auxiliary_name_scope=False) as scope:
                self._scope = scope
        n_vars = len(global_variables())
        reg = get_collection_ref(GraphKeys.REGULARIZATION_LOSSES)
        upd = get_collection_ref(GraphKeys.UPDATE_OPS)
        n_reg, n_upd = len(reg), len(upd)
        with variable_scope(self._scope, reuse=True if self.built else None, auxiliary_name_scope=False), \
                (name_scope(self.name) if self._names_ops else contextlib.nullcontext()):
            if not self.built:
                self.build(_shape_of(inputs))
                self.built = True
            outputs = self.call(inputs, *args, **kwargs)
        self._weights += global_variables()[n_vars:]
        # Keras keeps these to the layer: out of the graph's collections, as TensorFlow's Keras does.
        self._losses += reg[n_reg:]
        self._updates += upd[n_upd:]
        del reg[n_reg:], upd[n_upd:]
        node = Node(self, inputs, outputs, args, {k: v for k, v in kwargs.items() if k != "training"})
        self._inbound_nodes.append(node)
        for i, t in enumerate(flatten(outputs)):
            if isinstance(t, Tensor):
                t._keras_history = (self, len(self._inbound_nodes) - 1, i)
        return outputs

    apply = __call__

    # -- state --------------------------------------------------------------------------------------------------
    @property
    def weights(self) -> list:
        """The variables in the order they were made (Keras's order: kernel, bias, ...)."""
        return list(self._weights)

    variables = weights

    @property
    def trainable_weights(self) -> list:
        if not self.trainable:
            return []
        trainable = {id(v) for v in trainable_variables()}
        return [v for v in self.weights if id(v) in trainable]

    trainable_variables = trainable_weights

    @property
    def non_trainable_weights(self) -> list:
        trainable = {id(v) for v in self.trainable_weights}
        return [v for v in self.weights if id(v) not in trainable]

    non_trainable_variables = non_trainable_weights

    @property
    def losses(self) -> list:
        """The regularization losses of this layer's weights (and add_loss's)."""
        return list(self._losses)

    def add_loss(self, loss, inputs=None) -> None:
        self._losses.append(convert_to_tensor(loss))

    @property
    def updates(self) -> list:
        """The moving-average updates (BatchNormalization) to run with a training step."""
        return list(self._updates)

    def get_weights(self) -> list[np.ndarray]:
        return backend.batch_get_value(self.weights)

    def set_weights(self, weights) -> None:
        """Loads arrays into the weights, in the order of `weights`."""
        mine = self.weights
        if len(weights) != len(mine):
            raise ValueError(f"{self.name}.set_weights: given {len(weights)} arrays for {len(mine)} weights "
                             f"({[v.op.name for v in mine]})")
        for v, w in zip(mine, weights):
            if tuple(v.shape.as_list()) != np.shape(w):
                raise ValueError(f"{self.name}.set_weights: weight {v.op.name} has shape {tuple(v.shape.as_list())}"
                                 f", the array given for it {np.shape(w)}")
        backend.batch_set_value(zip(mine, weights))

    def count_params(self) -> int:
        return int(sum(np.prod(v.shape.as_list()) for v in self.weights))

    def _node_output(self, index: int = -1):
        if not self._inbound_nodes:
            raise AttributeError(f"layer {self.name} has not been called yet, so it has no output")
        return self._inbound_nodes[index].outputs

    @property
    def input(self):
        if not self._inbound_nodes:
            raise AttributeError(f"layer {self.name} has not been called yet, so it has no input")
        return self._inbound_nodes[0].inputs

    @property
    def output(self):
        return self._node_output(0)

    @property
    def input_shape(self):
        return _map(self.input, lambda t: tuple(t.shape.as_list()))

    @property
    def output_shape(self):
        return _map(self.output, lambda t: tuple(t.shape.as_list()))

    def get_config(self) -> dict:
        return {"name": self.name, "trainable": self.trainable, "dtype": self.dtype}

    def _checkpoint_paths(self) -> list:
        """(attribute path, variable) of each weight as TensorFlow Keras's object-based checkpoints key it
        (`kernel`, `cell/kernel`, `forward_layer/cell/kernel`)."""
        prefix = self._scope.name + "/"
        return [(self._attribute_path(v.op.name[len(prefix):]), v) for v in self.weights]

    def _attribute_path(self, relative: str) -> str:
        return relative


class InputLayer(Layer):
    """The layer of a model's input: a placeholder named after the layer (`input_1`, `dense_input`, ...)."""

    def __init__(self, input_shape=None, batch_size=None, dtype=None, input_tensor=None, sparse=False, name=None,
                 batch_input_shape=None, **kwargs):
        if sparse:
            raise NotImplementedError("tf.keras.Input(sparse=True): sparse inputs are not supported by tfplus")
        name = name or f"input_{backend.get_uid('input')}"
        super().__init__(name=name, dtype=dtype, input_shape=input_shape, batch_size=batch_size,
                         batch_input_shape=batch_input_shape, **kwargs)
        if input_tensor is None:
            if self._batch_input_shape is None:
                raise ValueError(f"tf.keras.Input '{name}': give shape (or batch_shape, or tensor)")
            input_tensor = placeholder(backend.dtype_of(dtype), self._batch_input_shape, name=name)
        self.built = True
        self._inbound_nodes.append(Node(self, [], input_tensor))
        input_tensor._keras_history = (self, 0, 0)


def Input(shape=None, batch_size=None, name=None, dtype=None, sparse=False, tensor=None, batch_shape=None,
          **kwargs) -> Tensor:
    """A model's input placeholder, (batch_size, *shape): `x = tf.keras.Input((784,))`."""
    layer = InputLayer(input_shape=shape, batch_size=batch_size, name=name, dtype=dtype, input_tensor=tensor,
                       sparse=sparse, batch_input_shape=batch_shape, **kwargs)
    return layer.output


def _replay(nodes: list, inputs: list, new_inputs: list, training):
    """The nodes' layers called again on `new_inputs` in place of `inputs`: {id(old tensor): new tensor}."""
    new = {id(a): convert_to_tensor(b) for a, b in zip(inputs, new_inputs)}
    for node in nodes:
        if isinstance(node.layer, InputLayer):
            continue
        kwargs = dict(node.kwargs)
        if node.layer._expects_training and training is not None:
            kwargs["training"] = training
        out = node.layer(_map(node.inputs, lambda t: new[id(t)]), *node.args, **kwargs)
        for a, b in zip(flatten(node.outputs), flatten(out)):
            new[id(a)] = b
    return new


class Model(Training, Layer):
    """The functional model: `Model(inputs, outputs)` over the layers that lead from `inputs` to `outputs`;
    `model(x)` applies them (with their variables) to another input. compile, fit, evaluate, predict,
    train_on_batch, save_weights and load_weights train and run it in graph mode (tfplus.keras.training)."""

    def __init__(self, inputs=None, outputs=None, name=None, **kwargs):
        if inputs is None or outputs is None:
            raise NotImplementedError("tf.keras.Model: subclassed models (without inputs and outputs) are not "
                                      "supported by tfplus; build a functional Model(inputs, outputs) or a "
                                      "Sequential")
        super().__init__(name=name, **kwargs)
        self._set_graph(inputs, outputs)

    def _set_graph(self, inputs, outputs) -> None:
        self._nested_inputs, self._nested_outputs = inputs, outputs
        self.inputs, self.outputs = flatten(inputs), flatten(outputs)
        for t in self.inputs + self.outputs:
            if not hasattr(t, "_keras_history"):
                raise ValueError(f"tf.keras.Model '{self.name}': tensor {t.name} is not the output of a Keras layer "
                                 "(inputs come from tf.keras.Input, outputs from layers called on them)")
        self._nodes: list[Node] = []
        self._add_nodes(self.inputs + self.outputs)
        self._layers = list(dict.fromkeys(n.layer for n in self._nodes))
        self.built = True
        self._output_names = [t._keras_history[0].name for t in self.outputs]

    def _add_nodes(self, tensors: list) -> None:
        """The layer calls that lead from the model's inputs to `tensors`, in call order, into self._nodes."""
        seen = {id(n) for n in self._nodes}

        def visit(t):
            layer, node_index, _ = t._keras_history
            node = layer._inbound_nodes[node_index]
            if id(node) in seen:
                return
            seen.add(id(node))
            if not isinstance(layer, InputLayer) and any(t is x for x in self.inputs):
                return
            for x in flatten(node.inputs):
                visit(x)
            self._nodes.append(node)
        for t in tensors:
            visit(t)

    def add_loss(self, loss, inputs=None) -> None:
        """A loss of the model's tensors (a VAE's KL term): the layers it reads that lead to no output join the
        model after its own, as Keras's."""
        super().add_loss(loss)
        read, stack, ops = [], [convert_to_tensor(loss)], set()
        while stack:  # back through plain ops to the Keras layers' outputs
            t = stack.pop()
            if hasattr(t, "_keras_history"):
                read.append(t)
            elif id(t.op) not in ops:
                ops.add(id(t.op))
                stack += list(t.op.inputs)
        self._add_nodes(read)
        self._layers = list(dict.fromkeys(self._layers + [n.layer for n in self._nodes]))

    @property
    def layers(self) -> list:
        return list(self._layers)

    def get_layer(self, name=None, index=None):
        if index is not None:
            return self.layers[index]
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise ValueError(f"model {self.name} has no layer named {name!r}; its layers: "
                         f"{[la.name for la in self.layers]}")

    def call(self, inputs, training=None):
        new = _replay(self._nodes, self.inputs, flatten(inputs), training)
        return _map(self._nested_outputs, lambda t: new[id(t)])

    @property
    def weights(self) -> list:
        return list(dict.fromkeys(v for layer in self.layers for v in layer.weights))

    variables = weights

    @property
    def trainable_weights(self) -> list:
        if not self.trainable:
            return []
        return list(dict.fromkeys(v for layer in self.layers for v in layer.trainable_weights))

    trainable_variables = trainable_weights

    @property
    def losses(self) -> list:
        return [x for layer in self.layers for x in layer.losses] + self._losses

    @property
    def updates(self) -> list:
        return [x for layer in self.layers for x in layer.updates] + self._updates

    @property
    def input(self):
        return self._nested_inputs

    @property
    def output(self):
        return self._nested_outputs

    def summary(self, line_length=None, positions=None, print_fn=None) -> None:
        """Keras's table: each layer's name and type, output shape and number of parameters."""
        print_fn = print_fn or print
        width = line_length or 65
        cols = [int(width * p) for p in (positions or (0.45, 0.85, 1.0))]

        def row(*fields):
            line = ""
            for field, end in zip(fields, cols):
                line = (line + " " + str(field)).ljust(end)
            print_fn(line.rstrip())
        print_fn(f'Model: "{self.name}"')
        print_fn("_" * width)
        row("Layer (type)", "Output Shape", "Param #")
        print_fn("=" * width)
        for layer in self.layers:
            shape = _map(layer.output, lambda t: tuple(t.shape.as_list())) if layer._inbound_nodes else "?"
            row(f"{layer.name} ({type(layer).__name__})", shape, layer.count_params())
        print_fn("=" * width)
        trainable = int(sum(np.prod(v.shape.as_list()) for v in self.trainable_weights))
        total = self.count_params()
        print_fn(f"Total params: {total}")
        print_fn(f"Trainable params: {trainable}")
        print_fn(f"Non-trainable params: {total - trainable}")
        print_fn("_" * width)

    def get_config(self) -> dict:
        return {"name": self.name, "layers": [layer.get_config() for layer in self.layers]}

    def save(self, filepath, *args, **kwargs):
        raise NotImplementedError(f"{self.name}.save({filepath!r}): whole-model files (HDF5, SavedModel) are not "
                                  "supported by tfplus; save the weights with save_weights and rebuild the model in "
                                  "code before load_weights")



class Sequential(Model):
    """A stack of layers, each called on the previous one's output. With an input shape on the first layer
    (input_shape=..., or an Input first) it is built at once on a placeholder `<first layer>_input`; without,
    on its first call (its variables then under the model's scope: `sequential/dense/kernel`) or fit."""

    def __init__(self, layers=None, name=None):
        Layer.__init__(self, name=name)
        self._stack: list = []
        self.inputs, self.outputs = [], []
        for layer in layers or []:
            self.add(layer)

    @property
    def layers(self) -> list:
        return list(self._stack)

    def add(self, layer) -> None:
        if isinstance(layer, InputLayer):
            layer = layer.output
        if isinstance(layer, Tensor):  # Sequential([tf.keras.Input(...), ...])
            if self._stack or self.inputs:
                raise ValueError(f"Sequential '{self.name}': an Input must come first")
            self._set_graph(layer, layer)
            self._nodes = []
            return
        if not isinstance(layer, Layer):
            raise TypeError(f"Sequential '{self.name}'.add: expected a tf.keras layer, got {type(layer).__name__}")
        self._stack.append(layer)
        if self.outputs:
            self._set_graph(self.inputs[0], layer(self.outputs[0]))
        elif len(self._stack) == 1 and layer._batch_input_shape is not None:
            x = Input(batch_shape=layer._batch_input_shape, dtype=layer.dtype, name=f"{layer.name}_input")
            self._set_graph(x, layer(x))

    def pop(self) -> None:
        raise NotImplementedError("Sequential.pop: not supported by tfplus; build the model without the layer")

    def build(self, input_shape=None) -> None:
        """Builds a model made without an input shape on a placeholder of `input_shape` (batch first), in the
        current variable scope (a first call's: the model's own)."""
        if self.outputs:
            return
        if not self._stack:
            raise ValueError(f"Sequential '{self.name}' has no layers to build")
        x = Input(batch_shape=tuple(TensorShape(input_shape).as_list()), name=f"{self._stack[0].name}_input")
        out = x
        for layer in self._stack:
            out = layer(out)
        self._set_graph(x, out)

    def _build_from_data(self, batch_shape) -> None:
        """fit/predict on a model not built yet: built in its scope, as a first call would."""
        if self._scope is None:
            with variable_scope(None, default_name=self.name) as scope:
                self._scope = scope
        with variable_scope(self._scope):
            self.build(batch_shape)

    def call(self, inputs, training=None):
        out = inputs
        for layer in self._stack:
            out = layer(out, training=training) if layer._expects_training and training is not None else layer(out)
        return out
