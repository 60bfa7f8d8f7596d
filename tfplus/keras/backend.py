"""tf.keras.backend in graph mode: the session Keras runs models in, the learning phase, layer-name counters.

    import tfplus as tf
    K = tf.keras.backend
    sess = tf.Session(); K.set_session(sess)       # fit/predict/get_weights then run in sess
    sess.run(train_op, {x: xs, K.learning_phase(): 1})

As TF1's Keras: the learning phase is one boolean PlaceholderWithDefault per graph (`keras_learning_phase`,
False unless fed), and `get_session()` is the default session when one is open (else one of its own), after
running the initializers of the graph's variables that session has not initialized yet.
"""
from __future__ import annotations

import re
import threading
import weakref

import numpy as np

from tfplus import dtypes as _dt
from tfplus import nn
from tfplus.engine.session import Session
from tfplus.framework import convert_to_tensor, get_default_graph, get_default_session, name_scope, reset_default_graph
from tfplus.gradients import gradients as _gradients
from tfplus.ops import array_ops, math_ops, random_ops
from tfplus.ops.array_ops import placeholder_with_default
from tfplus.ops.control_flow_ops import group
from tfplus.variables import Variable, global_variables, variables_initializer

__all__ = ["backend", "batch_get_value", "batch_set_value", "clear_session", "epsilon", "floatx", "get_session",
           "get_uid", "get_value", "image_data_format", "int_shape", "learning_phase", "set_epsilon", "set_floatx",
           "set_learning_phase", "set_session", "set_value"]

_EPSILON = 1e-7
_FLOATX = "float32"
_session: Session | None = None
_session_lock = threading.RLock()
# Per graph: {"uids": {prefix: count}, "phase": the learning-phase tensor, "fixed": set_learning_phase's value}.
_graph_state: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _state() -> dict:
    return _graph_state.setdefault(get_default_graph(), {"uids": {}})


def backend() -> str:
    return "tensorflow"


def epsilon() -> float:
    """The fuzz factor of Keras's losses and metrics (1e-7)."""
    return _EPSILON


def set_epsilon(value: float) -> None:
    global _EPSILON
    _EPSILON = float(value)


def floatx() -> str:
    return _FLOATX


def set_floatx(value: str) -> None:
    global _FLOATX
    if value not in ("float16", "float32", "float64"):
        raise ValueError(f"tf.keras.backend.set_floatx: unknown floatx {value!r} (float16, float32 or float64)")
    _FLOATX = value


def image_data_format() -> str:
    return "channels_last"


def get_uid(prefix: str = "") -> int:
    """1, 2, ... per prefix in the current graph: the numbers of Keras's default layer names."""
    uids = _state()["uids"]
    uids[prefix] = uids.get(prefix, 0) + 1
    return uids[prefix]


def to_snake_case(name: str) -> str:
    """A class name as Keras names its layers: Conv2D -> conv2d, MaxPooling2D -> max_pooling2d, ReLU -> re_lu."""
    s = re.sub("(.)([A-Z][a-z0-9]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", s).lower()


def unique_object_name(prefix: str) -> str:
    """`prefix`, `prefix_1`, ... in the current graph."""
    uid = get_uid(prefix)
    return prefix if uid == 1 else f"{prefix}_{uid - 1}"


def learning_phase():
    """The learning phase: set_learning_phase's 0 or 1, else the graph's boolean `keras_learning_phase` tensor
    (False unless fed: feed 1 to train with Dropout and BatchNormalization in training mode)."""
    state = _state()
    if "fixed" in state:
        return state["fixed"]
    if "phase" not in state:
        with name_scope(""):
            state["phase"] = placeholder_with_default(False, (), name="keras_learning_phase")
    return state["phase"]


def set_learning_phase(value: int) -> None:
    """Fixes the learning phase of the current graph to 0 (test) or 1 (train)."""
    if value not in (0, 1):
        raise ValueError(f"tf.keras.backend.set_learning_phase: expected 0 or 1, got {value!r}")
    _state()["fixed"] = value


def learning_phase_feed(training: bool) -> dict:
    """{the learning-phase tensor: training} where the current graph has one (what fit and predict feed)."""
    phase = _state().get("phase")
    return {} if phase is None or "fixed" in _state() else {phase: training}


def set_session(session: Session | None) -> None:
    """The session Keras runs models in (fit, predict, get_weights, ...)."""
    global _session
    _session = session


def get_session() -> Session:
    """The default session if one is open, else set_session's or one of Keras's own for the current graph; the
    graph's variables it has not initialized are initialized first (as TF1's Keras does)."""
    global _session
    graph = get_default_graph()
    # NOTE: one thread at a time (request threads of a server): two first calls made two sessions, one thread's
    # weights were then another's fresh random ones, and a variable seen uninitialized by two threads was
    # initialized again after the first had trained it.
    with _session_lock:
        sess = get_default_session()
        if sess is None or sess.graph is not graph:
            if _session is None or _session.graph is not graph or getattr(_session, "_closed", False):
                _session = Session(graph=graph)
            sess = _session
        fresh = [v for v in global_variables() if v.op.name not in sess.variables]
        if fresh:
            sess.run(variables_initializer(fresh))
    return sess


def clear_session() -> None:
    """A fresh default graph (and Keras session): layer names start again at `dense`, `conv2d`, ..."""
    global _session
    if _session is not None:
        _session.close()
    _session = None
    reset_default_graph()


def int_shape(x) -> tuple | None:
    """x's static shape as a tuple of ints and None (None for an unknown rank)."""
    shape = convert_to_tensor(x).shape
    return None if shape.ndims is None else tuple(shape.as_list())


def get_value(x) -> np.ndarray:
    return get_session().run(x)


def batch_get_value(tensors: list) -> list:
    return get_session().run(list(tensors)) if tensors else []


def set_value(x, value) -> None:
    x.load(np.asarray(value, dtype=x.dtype.np), get_session())


def batch_set_value(pairs) -> None:
    sess = get_session()
    for x, value in pairs:
        x.load(np.asarray(value, dtype=x.dtype.np), sess)


def dtype_of(name) -> _dt.DType:
    return _dt.as_dtype(name or _FLOATX)


def function(inputs, outputs, updates=None, name=None, **kwargs):
    """Keras's K.function: `f([arrays]) -> the outputs' values` (as a list if outputs is one), run in
    get_session() with the updates; the learning phase may be one of the inputs.

        get_features = K.function([model.input, K.learning_phase()], [model.layers[1].output])
        features = get_features([x, 0])[0]
    """
    inputs = list(inputs)
    single = not isinstance(outputs, (list, tuple))
    fetches = [outputs] if single else list(outputs)
    step = group(*updates) if updates else None

    def run(values):
        if len(values) != len(inputs):
            raise ValueError(f"K.function: called with {len(values)} arrays for {len(inputs)} inputs "
                             f"({[getattr(t, 'name', t) for t in inputs]})")
        out = get_session().run(fetches + ([step] if step is not None else []), dict(zip(inputs, values)))
        out = out[:len(fetches)]
        return out[0] if single else out
    return run


# -- tensor functions (Keras's argument names: axis, keepdims; losses take (target, output)) -----------------------
def _reduce(fn):
    def reduce(x, axis=None, keepdims=False):
        x = convert_to_tensor(x)
        if x.dtype is _dt.bool_:
            x = math_ops.cast(x, dtype_of(None))
        return fn(x, axis, keepdims=keepdims)
    reduce.__name__ = fn.__name__.replace("reduce_", "")
    return reduce


mean, sum, max, min = (_reduce(math_ops.reduce_mean), _reduce(math_ops.reduce_sum),  # noqa: A001
                       _reduce(math_ops.reduce_max), _reduce(math_ops.reduce_min))
square, exp, log, abs, sign = math_ops.square, math_ops.exp, math_ops.log, math_ops.abs, math_ops.sign  # noqa: A001
maximum, minimum, pow, equal = math_ops.maximum, math_ops.minimum, math_ops.pow, math_ops.equal  # noqa: A001
cast, stop_gradient, dot = math_ops.cast, array_ops.stop_gradient, math_ops.matmul
reshape, transpose, expand_dims, squeeze = array_ops.reshape, array_ops.transpose, array_ops.expand_dims, \
    array_ops.squeeze
shape, zeros_like, ones_like = array_ops.shape, array_ops.zeros_like, array_ops.ones_like
relu, sigmoid, tanh, softplus, elu = nn.relu, nn.sigmoid, nn.tanh, nn.softplus, nn.elu


def sqrt(x):
    """sqrt of x clipped at 0 (Keras's)."""
    return math_ops.sqrt(math_ops.maximum(convert_to_tensor(x), 0.0))


def clip(x, min_value, max_value):
    return math_ops.clip_by_value(x, min_value, max_value)


def argmax(x, axis=-1):
    return math_ops.argmax(x, axis)


def concatenate(tensors, axis=-1):
    return array_ops.concat(list(tensors), axis)


def softmax(x, axis=-1):
    return nn.softmax(x, axis=axis)


def l2_normalize(x, axis=None):
    return nn.l2_normalize(x, axis=axis)


def gradients(loss, variables):
    return _gradients(loss, variables)


def constant(value, dtype=None, shape=None, name=None):
    return array_ops.constant(value, dtype=dtype_of(dtype), shape=shape, name=name)


def zeros(shape, dtype=None, name=None):
    return array_ops.zeros(shape, dtype=dtype_of(dtype), name=name)


def ones(shape, dtype=None, name=None):
    return array_ops.ones(shape, dtype=dtype_of(dtype), name=name)


def variable(value, dtype=None, name=None, constraint=None):
    """A variable holding `value` (initialized by get_session)."""
    return Variable(np.asarray(value, dtype=dtype_of(dtype).np), name=name)


def placeholder(shape=None, ndim=None, dtype=None, sparse=False, name=None):
    if shape is None and ndim is not None:
        shape = (None,) * ndim
    return array_ops.placeholder(dtype_of(dtype), shape, name=name)


def random_normal(shape, mean=0.0, stddev=1.0, dtype=None, seed=None):
    return random_ops.random_normal(shape, mean, stddev, dtype_of(dtype), seed=seed)


def random_uniform(shape, minval=0.0, maxval=1.0, dtype=None, seed=None):
    return random_ops.random_uniform(shape, minval, maxval, dtype_of(dtype), seed=seed)


# Keras's backend crossentropies: (target, output); binary_crossentropy elementwise, the others per example.
# NOTE: imported when called: tfplus.keras.losses imports this module.
def binary_crossentropy(target, output, from_logits=False):
    from tfplus.keras import losses
    return losses.elementwise_binary_crossentropy(target, output, from_logits)


def categorical_crossentropy(target, output, from_logits=False, axis=-1):
    from tfplus.keras import losses
    return losses.categorical_crossentropy(target, output, from_logits)


def sparse_categorical_crossentropy(target, output, from_logits=False, axis=-1):
    from tfplus.keras import losses
    return losses.sparse_categorical_crossentropy(target, output, from_logits)


from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr(__name__, "tf.keras.backend")
