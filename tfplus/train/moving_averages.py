"""tf.train.ExponentialMovingAverage (TF1): shadow copies of variables (or tensors: losses) that track their moving
average.

    import tfplus as tf
    ema = tf.train.ExponentialMovingAverage(decay=0.99)
    with tf.control_dependencies([train_step]):
        train_op = ema.apply(tf.trainable_variables())   # shadow -= (1 - decay) * (shadow - var)
    eval_w = ema.average(w)                               # the variable `w/ExponentialMovingAverage`
"""
from __future__ import annotations

from tfplus.framework import GraphKeys, Tensor, convert_to_tensor, get_collection, get_default_graph, name_scope
from tfplus.ops import array_ops, math_ops
from tfplus.ops.control_flow_ops import group
from tfplus.variables import Variable, global_variables, slot_variable_name, trainable_variables

MOVING_AVERAGE_VARIABLES = GraphKeys.MOVING_AVERAGE_VARIABLES


class ExponentialMovingAverage:
    """shadow = decay * shadow + (1 - decay) * value per apply(); with num_updates, the decay used is
    min(decay, (1 + num_updates) / (10 + num_updates)), so early averages follow the variables closely."""

    def __init__(self, decay, num_updates=None, zero_debias: bool = False, name: str = "ExponentialMovingAverage"):
        if zero_debias:
            raise NotImplementedError("ExponentialMovingAverage(zero_debias=True) is not implemented in tfplus")
        self._decay, self._num_updates, self.name = decay, num_updates, name
        self._averages: dict[Variable, Variable] = {}

    def apply(self, var_list=None):
        """Creates the shadow variables (first call) and returns the op that updates them all. `var_list` holds
        variables and tensors (TF1's loss averages): a variable's shadow starts at its initial value, a tensor's
        at zeros."""
        var_list = trainable_variables() if var_list is None else list(var_list)
        graph = get_default_graph()
        for var in var_list:
            if not isinstance(var, (Variable, Tensor)):
                raise TypeError(f"ExponentialMovingAverage.apply: {var!r} is neither a tf.Variable nor a tf.Tensor")
            if not var.dtype.is_floating:
                raise TypeError(f"ExponentialMovingAverage.apply: {var.op.name} has dtype {var.dtype.name}; a float "
                                "dtype is needed")
            if var in self._averages:
                continue
            if isinstance(var, Variable):
                start = var.initial_value
            else:
                shape = var.shape.as_list() if var.shape.ndims is not None else None
                if shape is None or None in shape:
                    raise ValueError(f"ExponentialMovingAverage.apply: tensor {var.name} has shape {var.shape}; its "
                                     "shadow variable needs a fully known shape (set_shape it first)")
            # TF1 (init_scope): the shadow lives outside the caller's scopes and control dependencies, and outside
            # any tf.cond it is applied in (the other branch reads it: the 2016 batch norm's ema.average).
            home = (getattr(graph, "outer_graphs", ()) or (graph,))[-1]
            with home.as_default(), home.name_scope(None), home.control_dependencies(None):
                if isinstance(var, Tensor):
                    start = array_ops.zeros(shape, var.dtype.base_dtype)
                shadow = Variable(start, trainable=False, name=slot_variable_name(var.op.name, self.name))
            if isinstance(var, Variable):  # TF1 lists variables only there
                graph.add_to_collection(MOVING_AVERAGE_VARIABLES, var)
            self._averages[var] = shadow
        with name_scope(self.name) as scope:
            decay = convert_to_tensor(self._decay, name="decay")
            if self._num_updates is not None:
                n = math_ops.cast(self._num_updates, decay.dtype)
                decay = math_ops.minimum(decay, (1.0 + n) / (10.0 + n))
            updates = []
            for var in var_list:
                shadow = self._averages[var]
                with name_scope(var.op.name):
                    one_minus = 1.0 - math_ops.cast(decay, var.dtype)
                    # read_value(): a fresh read under the caller's control dependencies (after a train step)
                    value = var.read_value() if isinstance(var, Variable) else var
                    updates.append(shadow.assign_sub((shadow - value) * one_minus))
            return group(*updates, name=scope.rstrip("/"))

    def average(self, var) -> Variable | None:
        """The shadow variable of `var`, a variable or tensor (None before apply)."""
        return self._averages.get(var)

    def average_name(self, var) -> str:
        """`<var's op name>/<name>`: the shadow's name and its key in checkpoints, made outside any variable scope
        (as TF1's, whose shadows made inside one take its prefix while this name does not)."""
        return f"{var.op.name}/{self.name}"

    def variables_to_restore(self, moving_avg_variables=None) -> dict:
        """{checkpoint key: variable} that restores every averaged variable from its moving average (and every
        other variable from itself), for evaluating with the averages."""
        averaged = moving_avg_variables
        if averaged is None:
            averaged = get_collection(MOVING_AVERAGE_VARIABLES) + trainable_variables()
        out = {}
        for v in global_variables():
            if v in self._averages.values():
                continue
            out[self.average_name(v) if v in averaged else v.op.name] = v
        return out


def assign_moving_average(variable, value, decay, zero_debias: bool = False, name=None) -> Tensor:
    """variable -= (1 - decay) * (variable - value); returns the updated variable."""
    if zero_debias:
        raise NotImplementedError("assign_moving_average(zero_debias=True) is not implemented in tfplus")
    with name_scope(name, "AssignMovingAvg"):
        one_minus = 1.0 - math_ops.cast(convert_to_tensor(decay), variable.dtype)
        return variable.assign_sub((variable - value) * one_minus)
