"""tf.Variable, tf.get_variable and tf.variable_scope (TF1 semantics, ref variables)."""
from __future__ import annotations

import contextlib

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


def variables_initializer(var_list, name="init"):
    from tfplus.ops.control_flow_ops import group, no_op
    if not var_list:
        return no_op(name=name)
    return group(*[v.initializer for v in var_list], name=name)


def global_variables_initializer():
    """The op that initializes every global variable: `sess.run(tf.global_variables_initializer())`."""
    return variables_initializer(global_variables(), name="init")


def local_variables_initializer():
    return variables_initializer(local_variables(), name="init_local")


# -- variable scopes and get_variable --------------------------------------------------------------------------
AUTO_REUSE = "auto_reuse"


class VariableScope:
    """The state of one `tf.variable_scope`: name prefix, reuse mode and default initializer/regularizer."""

    def __init__(self, name="", reuse=False, initializer=None, regularizer=None, dtype=_dt.float32):
        self.name, self.reuse, self.initializer, self.regularizer, self.dtype = \
            name, reuse, initializer, regularizer, dtype
        self.original_name_scope = ""

    def reuse_variables(self):
        self.reuse = True


def get_variable_scope() -> VariableScope:
    stack = get_default_graph()._var_scope_stack
    return stack[-1] if stack else VariableScope()


@contextlib.contextmanager
def variable_scope(name_or_scope, default_name=None, values=None, initializer=None, regularizer=None,
                   reuse=None, dtype=None, auxiliary_name_scope=True):
    """`with tf.variable_scope("conv1"):` prefixes get_variable names; `reuse=True` shares them."""
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
                          dtype or base.dtype)
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


def get_variable(name, shape=None, dtype=None, initializer=None, regularizer=None, trainable=True,
                 collections=None, validate_shape=True, use_resource=None, constraint=None):
    """Creates (or, under reuse, returns) the variable `<scope>/<name>`.

        >>> import tfplus as tf
        >>> with tf.variable_scope("fc"):
        ...     w = tf.get_variable("w", [4, 2], initializer=tf.zeros_initializer())
        >>> w.name
        'fc/w:0'
    """
    scope = get_variable_scope()
    full = f"{scope.name}/{name}" if scope.name else name
    store = get_default_graph()._var_store
    if shape is not None and not hasattr(shape, "__iter__"):  # TF1: one int or Dimension is a vector's length
        shape = [shape]
    if initializer is None:  # NOTE: not `initializer or ...`: a Tensor initializer has no truth value
        initializer = scope.initializer
    if dtype is None and isinstance(initializer, Tensor):  # TF1: a Tensor initializer gives shape and dtype
        dtype = initializer.dtype
    dtype = _dt.as_dtype(dtype) if dtype is not None else scope.dtype
    if full in store:
        if scope.reuse is False or scope.reuse is None:
            raise ValueError(f"Variable {full} already exists, disallowed. Did you mean to set reuse=True or "
                             "reuse=tf.AUTO_REUSE in variable_scope?")
        var = store[full]
        if shape is not None and not var.shape.is_compatible_with(shape):
            raise ValueError(f"Trying to share variable {full}, but specified shape {tuple(shape)} and found "
                             f"shape {var.shape}")
        return var
    if scope.reuse is True:
        raise ValueError(f"Variable {full} does not exist, or was not created with tf.get_variable(). Did you "
                         "mean to set reuse=tf.AUTO_REUSE in variable_scope?")
    if initializer is None:
        from tfplus.init_ops import glorot_uniform_initializer, zeros_initializer
        initializer = glorot_uniform_initializer() if dtype.is_floating else zeros_initializer()
    if shape is None and not isinstance(initializer, (Tensor, list, float, int)) and callable(initializer):
        raise ValueError(f"get_variable {full}: the shape must be given when the initializer is a function")
    if callable(initializer):
        init_fn = initializer
        shape_t = tuple(int(d) for d in shape)

        def initial():
            return init_fn(shape_t, dtype=dtype)
    else:
        initial = initializer
    graph = get_default_graph()
    with graph.name_scope(None), graph.control_dependencies(None):
        var = Variable(initial, trainable=trainable, collections=collections, validate_shape=validate_shape,
                       name=full, dtype=dtype)
    store[full] = var
    regularizer = regularizer or scope.regularizer
    if regularizer is not None:
        with name_scope(full + "/Regularizer/"):
            loss = regularizer(var)
        if loss is not None:
            graph.add_to_collection(GraphKeys.REGULARIZATION_LOSSES, loss)
    return var
