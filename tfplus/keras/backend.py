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
import weakref

import numpy as np

from tfplus import dtypes as _dt
from tfplus.engine.session import Session
from tfplus.framework import convert_to_tensor, get_default_graph, get_default_session, name_scope, reset_default_graph
from tfplus.ops.array_ops import placeholder_with_default
from tfplus.variables import global_variables, variables_initializer

__all__ = ["backend", "batch_get_value", "batch_set_value", "clear_session", "epsilon", "floatx", "get_session",
           "get_uid", "get_value", "image_data_format", "int_shape", "learning_phase", "set_epsilon", "set_floatx",
           "set_learning_phase", "set_session", "set_value"]

_EPSILON = 1e-7
_FLOATX = "float32"
_session: Session | None = None
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


from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr(__name__, "tf.keras.backend")
