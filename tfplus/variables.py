"""tf.Variable, tf.get_variable and tf.variable_scope (TF1 semantics, ref variables)."""
from __future__ import annotations

import contextlib
import functools
import math

import numpy as np

from tfplus import dtypes as _dt
from tfplus.framework import GraphKeys, Tensor, convert_to_tensor, get_default_graph, get_default_session, name_scope


class Variable:
    """A mutable tensor held by the Session: a VariableV2 node, its Assign initializer and a read Identity.

        >>> import tfplus as tf
        >>> w = tf.Variable(tf.zeros([3, 2]), name="w")
        >>> w.name, w.initializer.name, w.shape.as_list()
        ('w:0', 'w/Assign', [3, 2])
    """

    def __init__(self, initial_value=None, trainable=True, collections=None, validate_shape=True,
                 name=None, dtype=None, expected_shape=None, import_scope=None, constraint=None):
        from tfplus.ops import array_ops, state_ops
        if initial_value is None:
            raise ValueError("tf.Variable: initial_value must be given")
        graph = get_default_graph()
        with name_scope(name, "Variable") as scope:
            scope_name = scope[:-1]
            if callable(initial_value):
                with name_scope("Initializer"):
                    initial_value = initial_value()
            init = convert_to_tensor(initial_value, dtype=dtype, name="initial_value") \
                if not isinstance(initial_value, Tensor) else initial_value
            if dtype is not None and init.dtype is not _dt.as_dtype(dtype):
                from tfplus.ops.math_ops import cast
                init = cast(init, dtype)
            shape = init._shape if validate_shape else None
            if validate_shape and (shape is None or None in shape):
                raise ValueError(f"tf.Variable '{scope_name}': initial value shape {init.shape} must be fully "
                                 "defined (or pass validate_shape=False)")
            self._variable = state_ops.variable_op(shape if shape is not None else (), init.dtype, name=scope)
            if not validate_shape:
                self._variable._shape = None
            self._initializer_op = state_ops.assign(self._variable, init, validate_shape=validate_shape,
                                                    name="Assign").op
            with graph.control_dependencies(None):
                self._snapshot = array_ops.identity(self._variable, name="read")
        self._initial_value = init
        self._trainable = trainable
        collections = list(collections) if collections is not None else [GraphKeys.GLOBAL_VARIABLES]
        if trainable and GraphKeys.TRAINABLE_VARIABLES not in collections:
            collections.append(GraphKeys.TRAINABLE_VARIABLES)
        for c in collections:
            graph.add_to_collection(c, self)

    @classmethod
    def from_nodes(cls, variable: Tensor, initializer, snapshot: Tensor, initial_value: Tensor | None,
                   trainable: bool) -> Variable:
        """A Variable over nodes already in a graph (an imported MetaGraphDef's VariableDef: TF1's
        Variable(variable_def=...)); joins no collection."""
        self = cls.__new__(cls)
        self._variable, self._initializer_op, self._snapshot = variable, initializer, snapshot
        self._initial_value, self._trainable = initial_value, trainable
        return self

    # -- TF1 attributes -----------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._variable.name

    @property
    def op(self):
        return self._variable.op

    @property
    def graph(self):
        return self._variable.graph

    @property
    def device(self) -> str:
        return self._variable.device

    @property
    def dtype(self):
        return self._variable.dtype

    @property
    def shape(self):
        return self._variable.shape

    def get_shape(self):
        return self.shape

    @property
    def initializer(self):
        return self._initializer_op

    @property
    def initial_value(self) -> Tensor:
        return self._initial_value

    def initialized_value(self) -> Tensor:
        """The value, or the initial value while the variable is uninitialized (TF1's way to initialize one
        variable from another: `tf.Variable(tf.zeros_like(v.initialized_value()))`)."""
        from tfplus.ops.control_flow_ops import cond
        from tfplus.ops.state_ops import is_variable_initialized
        with get_default_graph().control_dependencies(None):
            return cond(is_variable_initialized(self._variable), self.read_value, lambda: self._initial_value)

    @property
    def trainable(self) -> bool:
        return self._trainable

    def value(self) -> Tensor:
        return self._snapshot

    def read_value(self) -> Tensor:
        return self._snapshot

    def _ref(self) -> Tensor:
        return self._variable

    def _as_tensor(self) -> Tensor:
        return self._snapshot

    def _as_graph_element(self):
        return self._snapshot

    def assign(self, value, use_locking=False, name=None, read_value=True):
        from tfplus.ops.state_ops import assign
        return assign(self._variable, value, use_locking=use_locking, name=name)

    def assign_add(self, delta, use_locking=False, name=None, read_value=True):
        from tfplus.ops.state_ops import assign_add
        return assign_add(self._variable, delta, use_locking=use_locking, name=name)

    def assign_sub(self, delta, use_locking=False, name=None, read_value=True):
        from tfplus.ops.state_ops import assign_sub
        return assign_sub(self._variable, delta, use_locking=use_locking, name=name)

    def _scatter(self, fn_name: str, sparse_delta, use_locking: bool, name):
        from tfplus.ops import sparse_training_ops
        if not hasattr(sparse_delta, "indices") or not hasattr(sparse_delta, "values"):
            raise TypeError(f"Variable.{fn_name} '{self.op.name}': sparse_delta must be a tf.IndexedSlices, got "
                            f"{type(sparse_delta).__name__}")
        return getattr(sparse_training_ops, fn_name)(self._variable, sparse_delta.indices, sparse_delta.values,
                                                      use_locking=use_locking, name=name)

    def scatter_update(self, sparse_delta, use_locking=False, name=None):
        """ref[sparse_delta.indices] = sparse_delta.values (tf.scatter_update)."""
        return self._scatter("scatter_update", sparse_delta, use_locking, name)

    def scatter_add(self, sparse_delta, use_locking=False, name=None):
        return self._scatter("scatter_add", sparse_delta, use_locking, name)

    def scatter_sub(self, sparse_delta, use_locking=False, name=None):
        return self._scatter("scatter_sub", sparse_delta, use_locking, name)

    def eval(self, session=None):
        return self._snapshot.eval(session=session)

    def load(self, value, session=None):
        """Writes `value` into the variable through a feed (no new graph nodes after the first call)."""
        session = session or get_default_session()
        if not hasattr(self, "_load_ph"):
            from tfplus.ops.array_ops import placeholder
            with self.graph.as_default(), name_scope(self.op.name + "/"):
                self._load_ph = placeholder(self.dtype, self._variable._shape, name="load_value")
                self._load_op = self.assign(self._load_ph, name="load")
        session.run(self._load_op, {self._load_ph: value})

    def __repr__(self):
        return f"<tf.Variable '{self.name}' shape={self.shape} dtype={self.dtype.name}>"

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other


def _variable_operator(name):
    def method(self, *args):
        return getattr(Tensor, name)(self._snapshot, *args)  # installed by the op modules (math_ops, array_ops)
    return method


for _name in Tensor.OVERLOADABLE_OPERATORS:
    setattr(Variable, _name, _variable_operator(_name))


# -- collections helpers ---------------------------------------------------------------------------------------
def global_variables(scope=None) -> list[Variable]:
    return get_default_graph().get_collection(GraphKeys.GLOBAL_VARIABLES, scope)


def trainable_variables(scope=None) -> list[Variable]:
    return get_default_graph().get_collection(GraphKeys.TRAINABLE_VARIABLES, scope)


def local_variables(scope=None) -> list[Variable]:
    return get_default_graph().get_collection(GraphKeys.LOCAL_VARIABLES, scope)


def model_variables(scope=None) -> list:
    return get_default_graph().get_collection(GraphKeys.MODEL_VARIABLES, scope)


def moving_average_variables(scope=None) -> list:
    return get_default_graph().get_collection(GraphKeys.MOVING_AVERAGE_VARIABLES, scope)


def variables_initializer(var_list, name="init"):
    from tfplus.ops.control_flow_ops import group, no_op
    if not var_list:
        return no_op(name=name)
    return group(*[v.initializer for v in var_list], name=name)


def report_uninitialized_variables(var_list=None, name="report_uninitialized_variables"):
    """tf.report_uninitialized_variables: a string vector, the names of the variables of `var_list` (default:
    the global and local ones) that hold no value in the running session."""
    from tfplus.ops.host_ops import host_op, object_vector
    from tfplus.ops.state_ops import is_variable_initialized
    var_list = global_variables() + local_variables() if var_list is None else list(var_list)
    names = [v.op.name.encode() for v in var_list]
    with name_scope(name):
        flags = [is_variable_initialized(v) for v in var_list]
        return host_op("report", lambda *ok: [object_vector([n for n, k in zip(names, ok) if not k])], flags,
                       [_dt.string], [(None,)])[0]


def assert_variables_initialized(var_list=None):
    """tf.assert_variables_initialized: an op whose run fails (FailedPreconditionError naming the variable) while
    a variable of `var_list` (default: the global and local ones) holds no value; its value is their ranks (TF1's).
    None when there are no variables."""
    from tfplus.ops.host_ops import host_op
    var_list = global_variables() + local_variables() if var_list is None else list(var_list)
    if not var_list:
        return None
    with name_scope("assert_variables_initialized"):
        ranks = host_op("ranks", lambda *values: [np.array([np.ndim(v) for v in values], np.int32).reshape(
            () if len(values) == 1 else (-1,))], [v.value() for v in var_list], [_dt.int32])
    return ranks[0]


def global_variables_initializer():
    """The op that initializes every global variable: `sess.run(tf.global_variables_initializer())`."""
    return variables_initializer(global_variables(), name="init")


def local_variables_initializer():
    return variables_initializer(local_variables(), name="init_local")


# -- variable scopes and get_variable --------------------------------------------------------------------------
AUTO_REUSE = "auto_reuse"


class VariableScope:
    """The state of one `tf.variable_scope`: name prefix, reuse mode, default initializer/regularizer/partitioner
    and the custom getter (the scope's own wrapped around the outer scopes')."""

    def __init__(self, name="", reuse=False, initializer=None, regularizer=None, dtype=_dt.float32,
                 partitioner=None, custom_getter=None):
        self.name, self.reuse, self.initializer, self.regularizer, self.dtype = \
            name, reuse, initializer, regularizer, dtype
        self.partitioner, self.custom_getter = partitioner, custom_getter
        self.original_name_scope = ""

    def reuse_variables(self):
        self.reuse = True


def slot_variable_name(primary_name: str, slot: str) -> str:
    """The name of a variable that shadows another (an optimizer's slot, a moving average), as TF1's slot_creator
    names it: under the variable scope open when it is made, `<scope>/<primary>/<slot>`."""
    scope = get_variable_scope().name
    return f"{scope}/{primary_name}/{slot}" if scope else f"{primary_name}/{slot}"


def get_variable_scope() -> VariableScope:
    stack = get_default_graph()._var_scope_stack
    return stack[-1] if stack else VariableScope()


@contextlib.contextmanager
def variable_scope(name_or_scope, default_name=None, values=None, initializer=None, regularizer=None,
                   caching_device=None, partitioner=None, custom_getter=None, reuse=None, dtype=None,
                   use_resource=None, constraint=None, auxiliary_name_scope=True):
    """`with tf.variable_scope("conv1"):` prefixes get_variable names; `reuse=True` shares them. A
    `custom_getter(getter, name, *args, **kwargs)` sees every get_variable inside (the outer scopes' getters
    inside it, as `getter`); a `partitioner` splits the variables made inside (tf.fixed_size_partitioner)."""
    graph = get_default_graph()
    outer = get_variable_scope()
    if isinstance(name_or_scope, VariableScope):
        full, base = name_or_scope.name, name_or_scope
    else:
        name = name_or_scope if name_or_scope is not None else _unique_scope(outer, default_name)
        if name is None:
            raise ValueError("variable_scope: give name_or_scope or default_name")
        full, base = (f"{outer.name}/{name}" if outer.name else name), outer
    if reuse is False:
        reuse = outer.reuse and not isinstance(name_or_scope, VariableScope)
    scope = VariableScope(full, reuse if reuse is not None else (base.reuse or outer.reuse),
                          initializer or base.initializer or outer.initializer,
                          regularizer or base.regularizer or outer.regularizer,
                          dtype or base.dtype, partitioner or base.partitioner or outer.partitioner,
                          _wrap_getter(custom_getter, base.custom_getter or outer.custom_getter))
    graph._var_scope_stack.append(scope)
    counts = _scope_counts()
    saved = dict(counts) if isinstance(name_or_scope, VariableScope) else None
    counts[full] = counts.get(full, 0) + 1
    try:
        if auxiliary_name_scope:
            short = full.rsplit("/", 1)[-1]
            with name_scope(short) as ns:
                scope.original_name_scope = ns
                yield scope
        else:
            yield scope
    finally:
        graph._var_scope_stack.pop()
        # As TF1: leaving a scope entered by name forgets the default names used inside it, so re-entering it
        # (e.g. with reuse=True) names unnamed layers conv2d, conv2d_1, ... again and finds their variables.
        if saved is not None:
            counts.clear()
            counts.update(saved)
        else:
            for key in [k for k in counts if k.startswith(full + "/")]:
                del counts[key]


def _wrap_getter(getter, outer):
    """TF1's composition of custom getters: the inner one is called first, with the outer one as its getter."""
    if getter is None or outer is None:
        return getter or outer

    def wrapped(getter_, name, *args, **kwargs):
        return getter(functools.partial(outer, getter_), name, *args, **kwargs)
    return wrapped


def _scope_counts() -> dict:
    """Full variable-scope name -> how many times it was opened (TF1's variable_scopes_count)."""
    return get_default_graph()._var_store.setdefault("__scope_counts__", {})


def _unique_scope(outer: VariableScope, default_name):
    if default_name is None:
        return None
    counts = _scope_counts()
    prefix = f"{outer.name}/{default_name}" if outer.name else default_name
    if not counts.get(prefix):
        return default_name
    n = 1
    while counts.get(f"{prefix}_{n}"):
        n += 1
    return f"{default_name}_{n}"


def get_variable(name, shape=None, dtype=None, initializer=None, regularizer=None, trainable=None,
                 collections=None, caching_device=None, partitioner=None, validate_shape=True, use_resource=None,
                 custom_getter=None, constraint=None, synchronization=None, aggregation=None):
    """Creates (or, under reuse, returns) the variable `<scope>/<name>`: through the scope's custom getter
    (or `custom_getter`) when there is one, split into a PartitionedVariable by the scope's (or this)
    `partitioner`.

        >>> import tfplus as tf
        >>> with tf.variable_scope("fc"):
        ...     w = tf.get_variable("w", [4, 2], initializer=tf.zeros_initializer())
        >>> w.name
        'fc/w:0'
    """
    scope = get_variable_scope()
    if shape is not None and not hasattr(shape, "__iter__"):  # TF1: one int or Dimension is a vector's length
        shape = [shape]
    if initializer is None:  # NOTE: not `initializer or ...`: a Tensor initializer has no truth value
        initializer = scope.initializer
    if dtype is None and isinstance(initializer, Tensor):  # TF1: a Tensor initializer gives shape and dtype
        dtype = initializer.dtype
    kwargs = dict(shape=shape, dtype=_dt.as_dtype(dtype) if dtype is not None else scope.dtype,
                  initializer=initializer, regularizer=regularizer or scope.regularizer,
                  reuse=scope.reuse, trainable=True if trainable is None else trainable, collections=collections,
                  caching_device=caching_device, partitioner=partitioner or scope.partitioner,
                  validate_shape=validate_shape, use_resource=use_resource, constraint=constraint,
                  synchronization=synchronization, aggregation=aggregation)
    full = f"{scope.name}/{name}" if scope.name else name
    custom_getter = custom_getter or scope.custom_getter
    if custom_getter is not None:
        return custom_getter(getter=_true_getter, name=full, **kwargs)
    return _true_getter(full, **kwargs)


def _true_getter(name, shape=None, dtype=_dt.float32, initializer=None, regularizer=None, reuse=None,
                 trainable=True, collections=None, partitioner=None, validate_shape=True, **_unused):
    """get_variable's store lookup or creation of the variable of full name `name` (the getter custom getters
    are given)."""
    full = name
    store = get_default_graph()._var_store
    dtype = _dt.as_dtype(dtype)
    if full in store:
        if reuse is False or reuse is None:
            raise ValueError(f"Variable {full} already exists, disallowed. Did you mean to set reuse=True or "
                             "reuse=tf.AUTO_REUSE in variable_scope?")
        var = store[full]
        if shape is not None and not var.get_shape().is_compatible_with(shape):
            raise ValueError(f"Trying to share variable {full}, but specified shape {tuple(shape)} and found "
                             f"shape {var.get_shape()}")
        return var
    if reuse is True:
        raise ValueError(f"Variable {full} does not exist, or was not created with tf.get_variable(). Did you "
                         "mean to set reuse=tf.AUTO_REUSE in variable_scope?")
    if initializer is None:
        from tfplus.init_ops import glorot_uniform_initializer, zeros_initializer
        initializer = glorot_uniform_initializer() if dtype.is_floating else zeros_initializer()
    if shape is None and not isinstance(initializer, (Tensor, list, float, int)) and callable(initializer):
        raise ValueError(f"get_variable {full}: the shape must be given when the initializer is a function")
    # A variable first asked for inside a tf.cond branch or a tf.while_loop body is made in the graph that
    # holds the control flow (TF's init_scope): made in the body's sub-graph, it was in no collection of the
    # script's graph, so the optimizer did not train it and global_variables_initializer did not start it.
    graph = get_default_graph()
    while getattr(graph, "outer", None) is not None:
        graph = graph.outer
    with graph.as_default(), graph.name_scope(None), graph.control_dependencies(None):
        if partitioner is not None:
            if shape is None and isinstance(initializer, Tensor):
                shape = initializer._shape
            var = _partitioned(full, shape, dtype, initializer, partitioner, trainable, collections, validate_shape)
        else:
            var = Variable(_initial(initializer, shape, dtype), trainable=trainable, collections=collections,
                           validate_shape=validate_shape, name=full, dtype=dtype)
        store[full] = var
        if regularizer is not None:
            with name_scope(full + "/Regularizer/"):
                loss = regularizer(var)
            if loss is not None:
                graph.add_to_collection(GraphKeys.REGULARIZATION_LOSSES, loss)
    return var


def _initial(initializer, shape, dtype):
    """The initial value Variable takes: the initializer called for `shape`, or the value itself."""
    if not callable(initializer):
        return initializer
    shape_t = tuple(int(d) for d in shape)
    return lambda: initializer(shape_t, dtype=dtype)


# -- partitioned variables -------------------------------------------------------------------------------------
class PartitionedVariable:
    """TF1's: one variable stored as slices `<name>/part_<i>` along one axis; iterating gives the slices, and
    as a tensor (tf.matmul(x, v), tf.convert_to_tensor) it is their concatenation."""

    def __init__(self, name: str, shape: tuple, dtype, variables: list, partitions: list):
        self.name, self._shape, self.dtype = name, tuple(shape), dtype
        self._variables, self._partitions = variables, list(partitions)

    def __iter__(self):
        return iter(self._variables)

    def __len__(self):
        return len(self._variables)

    def get_shape(self):
        from tfplus.tensor_shape import TensorShape
        return TensorShape(self._shape)

    shape = property(get_shape)

    def _get_variable_list(self) -> list:
        return list(self._variables)

    def _get_partitions(self) -> list:
        return list(self._partitions)

    def as_tensor(self) -> Tensor:
        from tfplus.ops.array_ops import concat, identity
        axis = next((i for i, p in enumerate(self._partitions) if p > 1), 0)
        with name_scope(None):
            if len(self._variables) == 1:
                return identity(self._variables[0], name=self.name + "/read")
            return concat([v.value() for v in self._variables], axis, name=self.name + "/ConcatPartitions/concat")

    _as_tensor = as_tensor

    def __repr__(self):
        return f"<tf.PartitionedVariable '{self.name}' shape={self._shape} parts={len(self._variables)}>"


def _partitioned(full, shape, dtype, initializer, partitioner, trainable, collections, validate_shape):
    if shape is None or any(d is None for d in shape):
        raise ValueError(f"get_variable {full}: a partitioned variable needs a fully defined shape, got {shape}")
    from tfplus.tensor_shape import TensorShape
    shape = tuple(int(d) for d in shape)
    partitions = list(partitioner(shape=TensorShape(shape), dtype=dtype))
    axes = [i for i, p in enumerate(partitions) if p > 1]
    if len(partitions) != len(shape) or len(axes) > 1 or any(p < 1 for p in partitions):
        raise ValueError(f"get_variable {full}: the partitioner gave {partitions} for shape {shape}; it must give "
                         "one count per dimension, at least 1, more than 1 on at most one axis")
    axis = axes[0] if axes else 0
    count = partitions[axis]
    if not callable(initializer) and count > 1:
        raise ValueError(f"get_variable {full}: a partitioned variable needs an initializer function (e.g. "
                         "tf.constant_initializer(0.5)), not a value")
    graph = get_default_graph()
    parts = []
    for i in range(count):
        # TF1's split: the first (n % count) parts are one row longer.
        rows = shape[axis] // count + (1 if i < shape[axis] % count else 0)
        part_shape = shape[:axis] + (rows,) + shape[axis + 1:]
        with graph.name_scope(None), graph.control_dependencies(None):
            parts.append(Variable(_initial(initializer, part_shape, dtype), trainable=trainable,
                                  collections=collections, validate_shape=validate_shape,
                                  name=f"{full}/part_{i}", dtype=dtype))
    return PartitionedVariable(full, shape, dtype, parts, partitions)


def _elements_bytes(shape, dtype, axis: int, bytes_per_string_element: int) -> tuple[int, int]:
    """(the dimension `axis` of `shape`, the bytes of the whole variable), checking the axis."""
    dims = shape.as_list() if hasattr(shape, "as_list") else list(shape)
    if not 0 <= axis < len(dims):
        raise ValueError(f"partitioner: axis {axis} is out of range for shape {dims}")
    size = bytes_per_string_element if dtype is _dt.string else _dt.as_dtype(dtype).size
    return dims[axis], math.prod(dims) * size


def fixed_size_partitioner(num_shards: int, axis: int = 0):
    """tf.fixed_size_partitioner: `num_shards` slices along `axis` (fewer if the axis is shorter)."""
    def partitioner(shape, dtype):
        n, _ = _elements_bytes(shape, dtype, axis, 16)
        return [1] * axis + [min(num_shards, n)] + [1] * (len(shape) - axis - 1)
    return partitioner


def min_max_variable_partitioner(max_partitions: int = 1, axis: int = 0, min_slice_size: int = 256 << 10,
                                 bytes_per_string_element: int = 16):
    """tf.min_max_variable_partitioner: slices of at least `min_slice_size` bytes, at most `max_partitions`."""
    def partitioner(shape, dtype):
        n, total = _elements_bytes(shape, dtype, axis, bytes_per_string_element)
        count = max(1, min(n, max_partitions, int(math.ceil(total / min_slice_size))))
        return [1] * axis + [count] + [1] * (len(shape) - axis - 1)
    return partitioner


def variable_axis_size_partitioner(max_shard_bytes: int, axis: int = 0, bytes_per_string_element: int = 16,
                                   max_shards: int | None = None):
    """tf.variable_axis_size_partitioner: slices of at most `max_shard_bytes` (whole rows of `axis`)."""
    if max_shard_bytes < 1:
        raise ValueError(f"variable_axis_size_partitioner: max_shard_bytes must be positive, got {max_shard_bytes}")

    def partitioner(shape, dtype):
        n, total = _elements_bytes(shape, dtype, axis, bytes_per_string_element)
        per_shard = max(1, math.floor(max_shard_bytes / (total // max(n, 1))))
        count = int(math.ceil(n / per_shard))
        if max_shards:
            count = min(max_shards, count)
        return [1] * axis + [count] + [1] * (len(shape) - axis - 1)
    return partitioner


def get_local_variable(name, shape=None, dtype=None, initializer=None, regularizer=None, trainable=False,
                       collections=None, **kwargs):
    """tf.get_local_variable: get_variable into LOCAL_VARIABLES (not saved, not trained)."""
    collections = list(collections or []) + [GraphKeys.LOCAL_VARIABLES]
    return get_variable(name, shape, dtype, initializer, regularizer, trainable=False, collections=collections,
                        **kwargs)


class Template:
    """What tf.make_template returns: `func_` called in one variable scope, creating its variables at the first
    call and sharing them at every later one."""

    def __init__(self, name, func, unique_name=None, custom_getter=None, create_scope_now=False):
        self._name, self._func, self._unique, self._getter = name, func, unique_name, custom_getter
        self._scope = None
        if create_scope_now:
            with variable_scope(unique_name, default_name=name, custom_getter=custom_getter) as scope:
                self._scope = scope

    def __call__(self, *args, **kwargs):
        if self._scope is None:
            with variable_scope(self._unique, default_name=self._name, custom_getter=self._getter) as scope:
                self._scope = scope
                return self._func(*args, **kwargs)
        with variable_scope(self._scope, reuse=True):
            return self._func(*args, **kwargs)

    @property
    def variable_scope(self):
        return self._scope

    @property
    def variable_scope_name(self) -> str | None:
        return None if self._scope is None else self._scope.name

    @property
    def variables(self) -> list:
        return [] if self._scope is None else global_variables(self._scope.name + "/")

    global_variables = variables

    @property
    def trainable_variables(self) -> list:
        return [] if self._scope is None else trainable_variables(self._scope.name + "/")


def make_template(name_, func_, create_scope_now_=False, unique_name_=None, custom_getter_=None, **kwargs):
    """tf.make_template: `func_` (given `kwargs` too) as a Template, whose calls share the variables its first
    call creates with tf.get_variable.

        >>> import tfplus as tf
        >>> dense = tf.make_template("dense", lambda x: tf.matmul(x, tf.get_variable("w", [2, 2])))
        >>> with tf.Graph().as_default():
        ...     a, b = dense(tf.ones([1, 2])), dense(tf.zeros([1, 2]))   # one variable dense/w
    """
    func = functools.partial(func_, **kwargs) if kwargs else func_
    return Template(name_, func, unique_name_, custom_getter_, create_scope_now_)
