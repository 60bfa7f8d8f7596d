"""tf.train optimizers (TF1): compute_gradients -> apply_gradients -> one grouped train op.

    import tfplus as tf
    loss = ...
    global_step = tf.train.get_or_create_global_step()
    train_op = tf.train.MomentumOptimizer(0.1, 0.9).minimize(loss, global_step=global_step)

Slots (per-variable state such as Momentum's velocity) are non-trainable global variables named like TF's,
`<var>/Momentum`, `<var>/Adam`, `<var>/Adam_1`, so global_variables_initializer and the Saver cover them.

A gradient that is an IndexedSlices (an embedding's) updates only the rows it names, as in TF1: the variable's
other rows and their slots stay as they are (`_apply_sparse`; Adam, whose TF1 sparse update decays every row's
moments, densifies it).
"""
from __future__ import annotations

from typing import Any

from tfplus import dtypes as _dt
from tfplus.framework import (
    GraphKeys,
    IndexedSlices,
    Operation,
    Tensor,
    control_dependencies,
    convert_to_tensor,
    get_default_graph,
    name_scope,
)
from tfplus.gradients import gradients
from tfplus.ops.array_ops import constant, zeros, zeros_like
from tfplus.ops.array_ops import fill as fill_
from tfplus.ops.control_flow_ops import group, tuple_
from tfplus.ops.math_ops import cast
from tfplus.ops.sparse_training_ops import (
    scatter_sub,
    sparse_apply_adadelta,
    sparse_apply_adagrad,
    sparse_apply_centered_rms_prop,
    sparse_apply_momentum,
    sparse_apply_rms_prop,
)
from tfplus.ops.state_ops import assign_add
from tfplus.ops.training_ops import (
    apply_adadelta,
    apply_adagrad,
    apply_adam,
    apply_centered_rms_prop,
    apply_gradient_descent,
    apply_momentum,
    apply_rms_prop,
)
from tfplus.tensor_shape import TensorShape
from tfplus.variables import Variable, slot_variable_name, trainable_variables

_VALID_DTYPES = (_dt.float16, _dt.float32, _dt.float64)


class Optimizer:
    """Base class: subclasses define `_create_slots`, `_apply_dense`, `_apply_sparse` for an IndexedSlices
    gradient (by default: `_apply_dense` of the dense gradient) and, if they keep state beyond the variables'
    slots, `_finish`. Hyperparameters may be numbers, tensors (e.g. a decay schedule) or
    callables."""

    GATE_NONE, GATE_OP, GATE_GRAPH = 0, 1, 2

    def __init__(self, use_locking: bool, name: str):
        if not name:
            raise ValueError("Must specify the optimizer name")
        self._use_locking = use_locking
        self._name = name
        self._slots: dict[str, dict[Variable, Variable]] = {}     # slot name -> {variable: slot variable}
        self._non_slot: dict[tuple[str, Any], Variable] = {}      # (name, graph) -> e.g. Adam's beta1_power
        self._hyper_cache: dict[tuple[str, _dt.DType], Tensor] = {}
        self._scope = ""

    def get_name(self) -> str:
        return self._name

    # -- the three steps ----------------------------------------------------------------------------------
    def minimize(self, loss, global_step=None, var_list=None, gate_gradients=GATE_OP, aggregation_method=None,
                 colocate_gradients_with_ops=False, name=None, grad_loss=None) -> Operation:
        """compute_gradients + apply_gradients: the op that takes one training step.

            >>> import tfplus as tf
            >>> w = tf.Variable(3.0)
            >>> train_op = tf.train.GradientDescentOptimizer(0.1).minimize(w * w)
        """
        grads_and_vars = self.compute_gradients(loss, var_list=var_list, gate_gradients=gate_gradients,
                                                aggregation_method=aggregation_method,
                                                colocate_gradients_with_ops=colocate_gradients_with_ops,
                                                grad_loss=grad_loss)
        if all(g is None for g, _ in grads_and_vars):
            raise ValueError("No gradients provided for any variable, check your graph for ops that do not "
                             f"support gradients, between variables {[v.name for _, v in grads_and_vars]} "
                             f"and loss {convert_to_tensor(loss).name}.")
        return self.apply_gradients(grads_and_vars, global_step=global_step, name=name)

    def compute_gradients(self, loss, var_list=None, gate_gradients=GATE_OP, aggregation_method=None,
                          colocate_gradients_with_ops=False, grad_loss=None) -> list[tuple]:
        """[(gradient, variable)] for `var_list` (default: the trainable variables); the gradient is None for
        a variable the loss does not depend on.

            >>> import tfplus as tf
            >>> w = tf.Variable(3.0)
            >>> [(g, v)] = tf.train.GradientDescentOptimizer(0.1).compute_gradients(w * w)  # g = 2 * w
        """
        if gate_gradients not in (self.GATE_NONE, self.GATE_OP, self.GATE_GRAPH):
            raise ValueError(f"gate_gradients must be one of Optimizer.GATE_NONE, GATE_OP or GATE_GRAPH, "
                             f"not {gate_gradients!r}")
        loss = convert_to_tensor(loss)
        _check_dtypes([loss], "loss")
        if var_list is None:
            var_list = trainable_variables()
        var_list = list(dict.fromkeys(var_list))
        if not var_list:
            raise ValueError("No variables to optimize.")
        for v in var_list:
            if not isinstance(v, Variable):
                raise TypeError(f"compute_gradients: var_list holds {v!r}, which is not a tf.Variable")
        grads = gradients(loss, var_list, grad_ys=grad_loss, aggregation_method=aggregation_method,
                          colocate_gradients_with_ops=colocate_gradients_with_ops)
        if gate_gradients == self.GATE_GRAPH:
            grads = tuple_(grads)
        pairs = list(zip(grads, var_list))
        _check_dtypes([v for g, v in pairs if g is not None], "variable")
        return pairs

    def apply_gradients(self, grads_and_vars, global_step=None, name=None) -> Operation:
        """Groups one update op per (gradient, variable) pair whose gradient is not None; with `global_step`,
        the returned op also increments it, after all the updates.

            >>> import tfplus as tf
            >>> w = tf.Variable(3.0)
            >>> opt = tf.train.GradientDescentOptimizer(0.1)
            >>> train_op = opt.apply_gradients(opt.compute_gradients(w * w))
        """
        pairs = []
        for pair in grads_and_vars:
            try:
                g, v = pair
            except (TypeError, ValueError):
                raise TypeError(f"apply_gradients: {pair!r} is not a (gradient, variable) pair") from None
            if not isinstance(v, Variable):
                raise TypeError(f"apply_gradients: {v!r} is not a tf.Variable")
            pairs.append((g if g is None or isinstance(g, IndexedSlices) else convert_to_tensor(g), v))
        if not pairs:
            raise ValueError("No variables provided.")
        var_list = [v for g, v in pairs if g is not None]
        if not var_list:
            raise ValueError(f"No gradients provided for any variable: {[v.name for _, v in pairs]}.")
        graph = var_list[0].graph
        with graph.as_default():
            self._create_slots(var_list)
            with name_scope(name, self._name) as scope:
                # Hyperparameter tensors are made afresh in this scope; _prepare is TF's no-argument hook, which
                # subclasses override without calling ours.
                self._scope, self._hyper_cache = scope, {}
                self._prepare()
                updates = []
                for g, v in pairs:
                    if g is None:
                        continue
                    with name_scope("update_" + v.op.name):
                        updates.append(self._apply_sparse_duplicate_indices(g, v) if isinstance(g, IndexedSlices)
                                       else self._apply_dense(g, v))
                if global_step is None:
                    train_op = self._finish(updates, scope)
                else:
                    with control_dependencies([self._finish(updates, "update")]):
                        train_op = assign_add(global_step, 1, name=scope).op
            train_ops = graph.get_collection_ref(GraphKeys.TRAIN_OP)
            if train_op not in train_ops:
                train_ops.append(train_op)
        return train_op

    # -- state ----------------------------------------------------------------------------------------------
    def get_slot(self, var: Variable, name: str) -> Variable | None:
        """The slot variable `name` (see get_slot_names) that this optimizer keeps for `var`, or None."""
        return self._slots.get(name, {}).get(var)

    def get_slot_names(self) -> list[str]:
        """Names of the slots this optimizer created, e.g. ['momentum'] or ['m', 'v']."""
        return sorted(self._slots)

    def variables(self) -> list[Variable]:
        """The optimizer's own variables in the default graph (slots and e.g. Adam's beta powers), by name."""
        graph = get_default_graph()
        own = [v for v in self._non_slot.values() if v.graph is graph]
        own += [s for slots in self._slots.values() for s in slots.values() if s.graph is graph]
        return sorted(own, key=lambda v: v.name)

    # -- for subclasses -------------------------------------------------------------------------------------
    def _create_slots(self, var_list: list[Variable]) -> None:
        """Creates the slot (and non-slot) variables `_apply_dense` needs; called before each apply."""

    def _prepare(self) -> None:
        """Called in apply_gradients' name scope before the updates: subclasses make tensors of their
        hyperparameters here (TF's hook)."""

    def _apply_dense(self, grad: Tensor, var: Variable) -> Operation:
        raise NotImplementedError(f"{type(self).__name__} must implement _apply_dense")

    def _apply_sparse_duplicate_indices(self, grad: IndexedSlices, var: Variable) -> Operation:
        """The update for a sparse gradient whose indices may repeat. TF1 sums the repeated rows, then calls
        `_apply_sparse`: the _SparseApply* ops that subclasses use do both, so this calls `_apply_sparse`."""
        return self._apply_sparse(grad, var)

    def _apply_sparse(self, grad: IndexedSlices, var: Variable) -> Operation:
        """Default: the dense update of the dense gradient (what an optimizer without a sparse rule does)."""
        return self._apply_dense(convert_to_tensor(grad), var)

    def _finish(self, update_ops: list[Operation], name: str) -> Operation:
        return group(*update_ops, name=name)

    def _hyper(self, name: str, value, dtype: _dt.DType) -> Tensor:
        """Hyperparameter `value` as a tensor of `dtype`, made once per apply_gradients in its name scope.
        Numbers become constants of that dtype (no float32 rounding for float64 variables); tensors are
        cast."""
        key = (name, dtype)
        if key not in self._hyper_cache:
            with name_scope(self._scope or None):
                self._hyper_cache[key] = _as_dtype(value() if callable(value) else value, dtype, name)
        return self._hyper_cache[key]

    def _zeros_slot(self, var: Variable, slot_name: str, op_name: str, fill: float = 0.0) -> Variable:
        """The slot `slot_name` of `var`, created on first use as a variable `<var>/<op_name>` filled with
        `fill` (zeros unless an optimizer starts it elsewhere, like RMSProp's ones)."""
        slots = self._slots.setdefault(slot_name, {})
        if var not in slots:
            slots[var] = _create_zeros_slot(var, op_name, fill)
        return slots[var]

    def _get_or_make_non_slot(self, name: str, initial_value, like: Variable) -> Variable:
        """A non-trainable variable shared by all the updates of one graph, e.g. Adam's `beta1_power`, of the
        dtype of `like`."""
        return self._create_non_slot_variable(lambda: _as_dtype(initial_value, like.dtype, "initial_value"), name,
                                              like)

    def _get_non_slot(self, name: str) -> Variable:
        return self._non_slot[(name, get_default_graph())]

    # TF's protected API, which custom optimizers (AdamW, RAdam, LAMB, LARS ports) call from their hooks.
    def _call_if_callable(self, param):
        return param() if callable(param) else param

    def _slot_dict(self, slot_name: str) -> dict:
        return self._slots.setdefault(slot_name, {})

    def _get_or_make_slot(self, var: Variable, val, slot_name: str, op_name: str) -> Variable:
        """The slot `slot_name` of `var`, created on first use as `<var>/<op_name>` starting at `val`."""
        slots = self._slot_dict(slot_name)
        if var not in slots:
            graph = var.graph
            with graph.as_default(), graph.name_scope(None), graph.control_dependencies(None):
                slots[var] = Variable(val, trainable=False, name=slot_variable_name(var.op.name, op_name))
        return slots[var]

    def _get_or_make_slot_with_initializer(self, var: Variable, initializer, shape, dtype, slot_name: str,
                                           op_name: str) -> Variable:
        """The slot `slot_name` of `var`, created on first use from `initializer(shape, dtype)`."""
        shape, dtype = TensorShape(shape).as_list(), _dt.as_dtype(dtype)
        return self._get_or_make_slot(var, lambda: initializer(shape, dtype=dtype), slot_name, op_name)

    def _create_non_slot_variable(self, initial_value, name: str, colocate_with) -> Variable:
        """A variable `name` shared by all the updates of the graph of `colocate_with` (Adam's beta1_power)."""
        key = (name, colocate_with.graph)
        if key not in self._non_slot:
            graph = colocate_with.graph
            with graph.as_default(), graph.control_dependencies(None):
                self._non_slot[key] = Variable(initial_value, trainable=False, name=name)
        return self._non_slot[key]

    def _get_non_slot_variable(self, name: str, graph=None) -> Variable | None:
        return self._non_slot.get((name, graph or get_default_graph()))

    def _non_slot_variables(self) -> list[Variable]:
        return list(self._non_slot.values())


def _as_dtype(value, dtype: _dt.DType, name: str) -> Tensor:
    if isinstance(value, Tensor) or hasattr(value, "_as_tensor"):
        t = convert_to_tensor(value)
        if t.dtype is dtype:
            return t
        return cast(t, dtype, name=name)
    return constant(value, dtype=dtype, name=name)


def _create_zeros_slot(var: Variable, op_name: str, fill: float = 0.0) -> Variable:
    if not var.shape.is_fully_defined():
        raise ValueError(f"cannot create the {op_name} slot of variable '{var.op.name}': its shape "
                         f"{var.shape} is not fully defined")
    shape, dtype, graph = var.shape.as_list(), var.dtype, var.graph
    # Slots live outside the caller's name scope and control dependencies, like TF's init_scope.
    with graph.as_default(), graph.name_scope(None), graph.control_dependencies(None):
        init = (lambda: zeros(shape, dtype)) if fill == 0 else (lambda: fill_(shape, constant(fill, dtype)))
        return Variable(init, trainable=False, name=slot_variable_name(var.op.name, op_name))


def _check_dtypes(tensors, what: str) -> None:
    for t in tensors:
        if t.dtype not in _VALID_DTYPES:
            raise TypeError(f"{what} '{t.name}' has dtype {t.dtype.name}; optimizers need one of "
                            f"{[d.name for d in _VALID_DTYPES]}")


class WrapperOptimizer(Optimizer):
    """An optimizer whose compute_gradients a subclass defines around the wrapped `optimizer`'s, and whose updates
    and slots are that optimizer's (tfplus.distributed's all-reduce, tfplus.federated's proximal term)."""

    def __init__(self, optimizer: Optimizer, use_locking: bool, name: str):
        super().__init__(use_locking=use_locking, name=name)
        self._optimizer = optimizer

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step, name=name)

    def get_slot(self, var, name):
        return self._optimizer.get_slot(var, name)

    def get_slot_names(self):
        return self._optimizer.get_slot_names()

    def variables(self):
        return self._optimizer.variables()


# -- the optimizers ------------------------------------------------------------------------------------------
class GradientDescentOptimizer(Optimizer):
    """var -= learning_rate * grad  (op ApplyGradientDescent)."""

    def __init__(self, learning_rate, use_locking: bool = False, name: str = "GradientDescent"):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate

    def _apply_dense(self, grad, var):
        lr = self._hyper("learning_rate", self._learning_rate, var.dtype)
        return apply_gradient_descent(var, lr, grad, use_locking=self._use_locking).op

    def _apply_sparse_duplicate_indices(self, grad, var):
        # TF1 subtracts lr * each row with ScatterSub, repeated rows in turn (no summing first).
        lr = self._hyper("learning_rate", self._learning_rate, var.dtype)
        return scatter_sub(var, grad.indices, grad.values * lr, use_locking=self._use_locking).op


class MomentumOptimizer(Optimizer):
    """accum = momentum * accum + grad; var -= learning_rate * accum (Nesterov: var -= learning_rate *
    (grad + momentum * accum)). Slot 'momentum', variable `<var>/Momentum`; op ApplyMomentum."""

    def __init__(self, learning_rate, momentum, use_locking: bool = False, name: str = "Momentum",
                 use_nesterov: bool = False):
        super().__init__(use_locking, name)
        self._learning_rate, self._momentum, self._use_nesterov = learning_rate, momentum, use_nesterov

    def _create_slots(self, var_list):
        for v in var_list:
            self._zeros_slot(v, "momentum", self._name)

    def _apply_dense(self, grad, var):
        return apply_momentum(var, self.get_slot(var, "momentum"),
                              self._hyper("learning_rate", self._learning_rate, var.dtype), grad,
                              self._hyper("momentum", self._momentum, var.dtype),
                              use_locking=self._use_locking, use_nesterov=self._use_nesterov).op

    def _apply_sparse(self, grad, var):
        return sparse_apply_momentum(var, self.get_slot(var, "momentum"),
                                     self._hyper("learning_rate", self._learning_rate, var.dtype), grad.values,
                                     grad.indices, self._hyper("momentum", self._momentum, var.dtype),
                                     use_locking=self._use_locking, use_nesterov=self._use_nesterov).op


class AdamOptimizer(Optimizer):
    """Adam as TF1 computes it (Kingma & Ba, section 2's bias correction folded into the step size):
    lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t); m = beta1 * m + (1 - beta1) * g;
    v = beta2 * v + (1 - beta2) * g^2; var -= lr_t * m / (sqrt(v) + epsilon).
    Slots 'm' and 'v' (`<var>/Adam`, `<var>/Adam_1`); beta1^t and beta2^t are the non-slot variables
    `beta1_power` and `beta2_power`, multiplied by beta1 and beta2 after each step's updates."""

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, use_locking: bool = False,
                 name: str = "Adam"):
        super().__init__(use_locking, name)
        self._lr, self._beta1, self._beta2, self._epsilon = learning_rate, beta1, beta2, epsilon

    def _create_slots(self, var_list):
        # TF keeps the powers with the first variable by name; they take its dtype here.
        first = min(var_list, key=lambda v: v.name)
        self._get_or_make_non_slot("beta1_power", self._beta1, first)
        self._get_or_make_non_slot("beta2_power", self._beta2, first)
        for v in var_list:
            self._zeros_slot(v, "m", self._name)
            self._zeros_slot(v, "v", self._name)

    def _get_beta_accumulators(self) -> tuple[Variable, Variable]:
        return self._get_non_slot("beta1_power"), self._get_non_slot("beta2_power")

    def _apply_dense(self, grad, var):
        dt = var.dtype
        beta1_power, beta2_power = self._get_beta_accumulators()
        return apply_adam(var, self.get_slot(var, "m"), self.get_slot(var, "v"),
                          _as_dtype(beta1_power, dt, "beta1_power"),
                          _as_dtype(beta2_power, dt, "beta2_power"),
                          self._hyper("learning_rate", self._lr, dt), self._hyper("beta1", self._beta1, dt),
                          self._hyper("beta2", self._beta2, dt), self._hyper("epsilon", self._epsilon, dt),
                          grad, use_locking=self._use_locking).op

    def _finish(self, update_ops, name):
        beta1_power, beta2_power = self._get_beta_accumulators()
        with control_dependencies(update_ops):
            dt = beta1_power.dtype
            update_beta1 = beta1_power.assign(beta1_power * self._hyper("beta1", self._beta1, dt),
                                              use_locking=self._use_locking)
            update_beta2 = beta2_power.assign(beta2_power * self._hyper("beta2", self._beta2, dt),
                                              use_locking=self._use_locking)
        return group(*update_ops, update_beta1, update_beta2, name=name)


class RMSPropOptimizer(Optimizer):
    """TF1's RMSProp: ms = decay * ms + (1 - decay) * g^2; mom = momentum * mom + lr * g / sqrt(ms + epsilon);
    var -= mom. Centered, the denominator is sqrt(ms - mg^2 + epsilon) with mg the moving mean gradient.
    Slots 'rms' (starts at ones, as in TF1), 'mg' when centered, and 'momentum' (`<var>/RMSProp`,
    `<var>/RMSProp_1`, ...); ops ApplyRMSProp, ApplyCenteredRMSProp."""

    def __init__(self, learning_rate, decay=0.9, momentum=0.0, epsilon=1e-10, use_locking: bool = False,
                 centered: bool = False, name: str = "RMSProp"):
        super().__init__(use_locking, name)
        self._lr, self._decay, self._momentum, self._epsilon = learning_rate, decay, momentum, epsilon
        self._centered = centered

    def _create_slots(self, var_list):
        for v in var_list:
            self._zeros_slot(v, "rms", self._name, fill=1.0)
            if self._centered:
                self._zeros_slot(v, "mg", self._name)
            self._zeros_slot(v, "momentum", self._name)

    def _hypers(self, dt) -> tuple:
        return (self._hyper("learning_rate", self._lr, dt), self._hyper("decay", self._decay, dt),
                self._hyper("momentum", self._momentum, dt), self._hyper("epsilon", self._epsilon, dt))

    def _apply_dense(self, grad, var):
        hypers = self._hypers(var.dtype) + (grad,)
        rms, mom = self.get_slot(var, "rms"), self.get_slot(var, "momentum")
        if self._centered:
            return apply_centered_rms_prop(var, self.get_slot(var, "mg"), rms, mom, *hypers,
                                           use_locking=self._use_locking).op
        return apply_rms_prop(var, rms, mom, *hypers, use_locking=self._use_locking).op

    def _apply_sparse(self, grad, var):
        hypers = self._hypers(var.dtype) + (grad.values, grad.indices)
        rms, mom = self.get_slot(var, "rms"), self.get_slot(var, "momentum")
        if self._centered:
            return sparse_apply_centered_rms_prop(var, self.get_slot(var, "mg"), rms, mom, *hypers,
                                                  use_locking=self._use_locking).op
        return sparse_apply_rms_prop(var, rms, mom, *hypers, use_locking=self._use_locking).op


class AdagradOptimizer(Optimizer):
    """accum += g^2; var -= lr * g / sqrt(accum). Slot 'accumulator' (`<var>/Adagrad`, starting at
    `initial_accumulator_value`); op ApplyAdagrad."""

    def __init__(self, learning_rate, initial_accumulator_value=0.1, use_locking: bool = False,
                 name: str = "Adagrad"):
        if initial_accumulator_value <= 0.0:
            raise ValueError(f"initial_accumulator_value must be positive: {initial_accumulator_value}")
        super().__init__(use_locking, name)
        self._lr, self._initial = learning_rate, initial_accumulator_value

    def _create_slots(self, var_list):
        for v in var_list:
            self._zeros_slot(v, "accumulator", self._name, fill=self._initial)

    def _apply_dense(self, grad, var):
        return apply_adagrad(var, self.get_slot(var, "accumulator"),
                             self._hyper("learning_rate", self._lr, var.dtype), grad,
                             use_locking=self._use_locking).op

    def _apply_sparse(self, grad, var):
        return sparse_apply_adagrad(var, self.get_slot(var, "accumulator"),
                                    self._hyper("learning_rate", self._lr, var.dtype), grad.values, grad.indices,
                                    use_locking=self._use_locking).op


class AdadeltaOptimizer(Optimizer):
    """accum = rho * accum + (1 - rho) * g^2; u = sqrt(accum_update + eps) / sqrt(accum + eps) * g;
    accum_update = rho * accum_update + (1 - rho) * u^2; var -= lr * u. Slots 'accum' and 'accum_update'
    (`<var>/Adadelta`, `<var>/Adadelta_1`); op ApplyAdadelta."""

    def __init__(self, learning_rate=0.001, rho=0.95, epsilon=1e-8, use_locking: bool = False,
                 name: str = "Adadelta"):
        super().__init__(use_locking, name)
        self._lr, self._rho, self._epsilon = learning_rate, rho, epsilon

    def _create_slots(self, var_list):
        for v in var_list:
            self._zeros_slot(v, "accum", self._name)
            self._zeros_slot(v, "accum_update", self._name)

    def _apply_dense(self, grad, var):
        dt = var.dtype
        return apply_adadelta(var, self.get_slot(var, "accum"), self.get_slot(var, "accum_update"),
                              self._hyper("lr", self._lr, dt), self._hyper("rho", self._rho, dt),
                              self._hyper("epsilon", self._epsilon, dt), grad, use_locking=self._use_locking).op

    def _apply_sparse(self, grad, var):
        dt = var.dtype
        return sparse_apply_adadelta(var, self.get_slot(var, "accum"), self.get_slot(var, "accum_update"),
                                     self._hyper("lr", self._lr, dt), self._hyper("rho", self._rho, dt),
                                     self._hyper("epsilon", self._epsilon, dt), grad.values, grad.indices,
                                     use_locking=self._use_locking).op


def _proximal_step(prox, lr, l1, l2):
    """TF's proximal update of the gradient step `prox` = var - lr * g: L1 soft-thresholding (l1 None: none),
    then L2 shrinking: sign(prox) * max(|prox| - lr * l1, 0) / (1 + lr * l2)."""
    from tfplus.ops import math_ops
    shrunk = prox if l1 is None else \
        math_ops.sign(prox) * math_ops.maximum(math_ops.abs(prox) - lr * l1, zeros_like(prox))
    return shrunk / (1.0 + lr * l2)


class _ProximalOptimizer(Optimizer):
    """The proximal optimizers' one rule (TF1's ApplyProximalGradientDescent and ApplyProximalAdagrad written
    with registered ops): a step of rate `_rate(var, g)` on var, then _proximal_step. A sparse gradient updates
    only its rows (repeated rows summed first)."""

    def __init__(self, learning_rate, l1, l2, use_locking, name):
        super().__init__(use_locking, name)
        self._lr, self._l1, self._l2 = learning_rate, l1, l2

    def _update(self, w, slots, g):
        """The new values of (var, *slots) from their values and the gradient g."""
        raise NotImplementedError

    def _prox(self, w, g, lr):
        dt = w.dtype
        l1 = self._hyper("l1", self._l1, dt) if self._l1 else None
        return _proximal_step(w - lr * g, lr, l1, self._hyper("l2", self._l2, dt))

    def _apply_dense(self, grad, var):
        from tfplus.ops.state_ops import assign
        variables = [var] + [self.get_slot(var, s) for s in self.get_slot_names()]
        new = self._update(var.value(), [v.value() for v in variables[1:]], grad)
        with control_dependencies(list(new)):  # every read is used before any variable is written
            return group(*[assign(v, x, use_locking=self._use_locking) for v, x in zip(variables, new)])

    def _apply_sparse(self, grad, var):
        from tfplus.ops import math_ops
        from tfplus.ops.array_ops import gather, size
        from tfplus.ops.sparse_training_ops import scatter_update
        from tfplus.ops.special_math_ops import unique
        rows, where = unique(grad.indices)
        summed = math_ops.unsorted_segment_sum(grad.values, where, size(rows))
        variables = [var] + [self.get_slot(var, s) for s in self.get_slot_names()]
        values = [gather(v.value(), rows) for v in variables]
        new = self._update(values[0], values[1:], summed)
        with control_dependencies(list(new)):
            return group(*[scatter_update(v, rows, x, use_locking=self._use_locking) for v, x in zip(variables, new)])


class ProximalGradientDescentOptimizer(_ProximalOptimizer):
    """var = prox(var - lr * g) with L1 and L2 strengths (TF1's ApplyProximalGradientDescent); no slots."""

    def __init__(self, learning_rate, l1_regularization_strength=0.0, l2_regularization_strength=0.0,
                 use_locking: bool = False, name: str = "ProximalGradientDescent"):
        super().__init__(learning_rate, l1_regularization_strength, l2_regularization_strength, use_locking, name)

    def _update(self, w, slots, g):
        return [self._prox(w, g, self._hyper("learning_rate", self._lr, w.dtype))]


class ProximalAdagradOptimizer(_ProximalOptimizer):
    """accum += g^2; var = prox(var - lr / sqrt(accum) * g) at the rate lr / sqrt(accum) (TF1's
    ApplyProximalAdagrad). Slot 'accumulator' (`<var>/ProximalAdagrad`, starting at initial_accumulator_value)."""

    def __init__(self, learning_rate, initial_accumulator_value=0.1, l1_regularization_strength=0.0,
                 l2_regularization_strength=0.0, use_locking: bool = False, name: str = "ProximalAdagrad"):
        if initial_accumulator_value <= 0.0:
            raise ValueError(f"ProximalAdagradOptimizer: initial_accumulator_value = {initial_accumulator_value} "
                             "must be positive")
        super().__init__(learning_rate, l1_regularization_strength, l2_regularization_strength, use_locking, name)
        self._initial = initial_accumulator_value

    def _create_slots(self, var_list):
        for v in var_list:
            self._zeros_slot(v, "accumulator", self._name, fill=self._initial)

    def _update(self, w, slots, g):
        from tfplus.ops import math_ops
        accum = slots[0] + g * g
        return [self._prox(w, g, self._hyper("learning_rate", self._lr, w.dtype) * math_ops.rsqrt(accum)), accum]


class FtrlOptimizer(Optimizer):
    """FTRL-Proximal (McMahan et al. 2013), TF1's ApplyFtrl(V2) written with registered ops: n' = n + g^2;
    z += g_s - (n'^-p - n^-p) / lr * w with g_s = g + 2 l2_shrinkage w and p = learning_rate_power; w = (sign(z)
    l1 - z) / (n'^-p / lr + 2 l2) where |z| > l1, else 0. Slots 'accum' (n, `<var>/Ftrl`, starting at
    initial_accumulator_value) and 'linear' (z, `<var>/Ftrl_1`). A sparse gradient updates only its rows (repeated
    rows summed first), as TF1's SparseApplyFtrl."""

    def __init__(self, learning_rate, learning_rate_power=-0.5, initial_accumulator_value=0.1,
                 l1_regularization_strength=0.0, l2_regularization_strength=0.0, use_locking: bool = False,
                 name: str = "Ftrl", accum_name=None, linear_name=None, l2_shrinkage_regularization_strength=0.0,
                 beta=None):
        for what, value in (("initial_accumulator_value", initial_accumulator_value),
                            ("l1_regularization_strength", l1_regularization_strength),
                            ("l2_regularization_strength", l2_regularization_strength),
                            ("l2_shrinkage_regularization_strength", l2_shrinkage_regularization_strength)):
            if value < 0.0:
                raise ValueError(f"FtrlOptimizer: {what} = {value} must be non-negative")
        if learning_rate_power > 0.0:
            raise ValueError(f"FtrlOptimizer: learning_rate_power = {learning_rate_power} must be at most zero")
        super().__init__(use_locking, name)
        self._lr, self._power, self._initial = learning_rate, learning_rate_power, initial_accumulator_value
        self._l1, self._shrinkage = l1_regularization_strength, l2_shrinkage_regularization_strength
        # TF1 folds beta into the L2 strength: l2 + beta / (2 lr)
        self._l2 = l2_regularization_strength + (0.0 if beta is None else beta / (2.0 * learning_rate))
        self._accum_name, self._linear_name = accum_name, linear_name

    def _create_slots(self, var_list):
        for v in var_list:
            self._zeros_slot(v, "accum", self._accum_name or self._name, fill=self._initial)
            self._zeros_slot(v, "linear", self._linear_name or self._name)

    def _ftrl(self, w, n, z, g):
        """The new (w, n, z) from the values w, n, z and the gradient g."""
        from tfplus.ops import math_ops
        dt = w.dtype
        lr, l1, l2 = (self._hyper(k, v, dt) for k, v in (("learning_rate", self._lr), ("l1", self._l1),
                                                             ("l2", self._l2)))

        def power(x):  # x^-p: TF's kernel takes a square root for the default -0.5
            return math_ops.sqrt(x) if self._power == -0.5 else math_ops.pow(x, -self._power)
        new_n = n + g * g
        shrunk = g + 2.0 * self._hyper("l2_shrinkage", self._shrinkage, dt) * w if self._shrinkage else g
        new_z = z + shrunk - (power(new_n) - power(n)) / lr * w
        quadratic = power(new_n) / lr + 2.0 * l2
        new_w = math_ops.where_v2(math_ops.abs(new_z) > l1, (math_ops.sign(new_z) * l1 - new_z) / quadratic,
                                  zeros_like(new_z))
        return new_w, new_n, new_z

    def _apply_dense(self, grad, var):
        from tfplus.ops.state_ops import assign
        accum, linear = self.get_slot(var, "accum"), self.get_slot(var, "linear")
        new = self._ftrl(var.value(), accum.value(), linear.value(), grad)
        with control_dependencies(list(new)):  # every read is used before any variable is written
            return group(*[assign(v, x, use_locking=self._use_locking) for v, x in zip((var, accum, linear), new)])

    def _apply_sparse(self, grad, var):
        from tfplus.ops import math_ops
        from tfplus.ops.array_ops import gather, size
        from tfplus.ops.sparse_training_ops import scatter_update
        from tfplus.ops.special_math_ops import unique
        rows, where = unique(grad.indices)
        summed = math_ops.unsorted_segment_sum(grad.values, where, size(rows))
        slots = (var, self.get_slot(var, "accum"), self.get_slot(var, "linear"))
        new = self._ftrl(*[gather(v.value(), rows) for v in slots], summed)
        with control_dependencies(list(new)):
            return group(*[scatter_update(v, rows, x, use_locking=self._use_locking) for v, x in zip(slots, new)])
