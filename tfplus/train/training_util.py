"""The global step: an int64 scalar variable "global_step", counted up by apply_gradients(global_step=...).

    import tfplus as tf
    step = tf.train.get_or_create_global_step()
    train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
"""
from __future__ import annotations

from tfplus import dtypes as _dt
from tfplus.framework import Graph, GraphKeys, Tensor, get_default_graph


def get_global_step(graph: Graph | None = None):
    """The global step variable of `graph` (the default graph): the one in the GLOBAL_STEP collection, else
    the tensor named 'global_step:0'; None if there is none.

        >>> import tfplus as tf
        >>> tf.train.get_global_step() is None
        True
    """
    graph = graph or get_default_graph()
    steps = graph.get_collection(GraphKeys.GLOBAL_STEP)
    if len(steps) > 1:
        raise ValueError(f"the {GraphKeys.GLOBAL_STEP!r} collection holds {len(steps)} values "
                         f"({[s.name for s in steps]}); there must be one global step")
    if steps:
        step = steps[0]
    else:
        try:
            step = graph.get_tensor_by_name("global_step:0")
        except KeyError:
            return None
    assert_global_step(step)
    return step


def assert_global_step(global_step) -> None:
    """Raises unless `global_step` is an integer scalar variable or tensor."""
    if not (isinstance(global_step, Tensor) or hasattr(global_step, "_ref")):
        raise TypeError(f"global step {global_step!r} must be a Variable or a Tensor")
    if not global_step.dtype.is_integer:
        raise TypeError(f"global step '{global_step.name}' has dtype {global_step.dtype.name}; it must be an "
                        "integer type")
    shape = global_step.shape
    if shape.ndims is not None and shape.ndims != 0:
        raise TypeError(f"global step '{global_step.name}' has shape {shape}; it must be a scalar")


def create_global_step(graph: Graph | None = None):
    """Creates the global step of `graph`: int64, initialized to 0, non-trainable, in the GLOBAL_VARIABLES and
    GLOBAL_STEP collections. Raises if it already exists.

        >>> import tfplus as tf
        >>> tf.train.create_global_step().name
        'global_step:0'
    """
    from tfplus.init_ops import zeros_initializer
    from tfplus.variables import get_variable
    graph = graph or get_default_graph()
    if get_global_step(graph) is not None:
        raise ValueError('"global_step" already exists.')
    with graph.as_default(), graph.name_scope(None):
        return get_variable(GraphKeys.GLOBAL_STEP, shape=[], dtype=_dt.int64, initializer=zeros_initializer(),
                            trainable=False, collections=[GraphKeys.GLOBAL_VARIABLES, GraphKeys.GLOBAL_STEP])


def get_or_create_global_step(graph: Graph | None = None):
    """The global step of `graph`, created if missing.

        >>> import tfplus as tf
        >>> step = tf.train.get_or_create_global_step()
        >>> step is tf.train.get_or_create_global_step()
        True
    """
    graph = graph or get_default_graph()
    step = get_global_step(graph)
    return create_global_step(graph) if step is None else step


def global_step(sess, global_step_tensor) -> int:
    """TF1's tf.train.global_step: the value of the global step, fetched with `sess`, as a Python int."""
    return int(sess.run(global_step_tensor))
