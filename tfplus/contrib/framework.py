"""tf.contrib.framework (TF1): the global-step helpers that older scripts take from here rather than tf.train, and
arg_scope, which sets the default arguments of the layer functions (tf.contrib.layers', slim's) in a block.

    import tfplus as tf
    step = tf.contrib.framework.get_or_create_global_step()
    with tf.contrib.framework.arg_scope([tf.contrib.layers.conv2d], padding="VALID", activation_fn=tf.nn.elu):
        h = tf.contrib.layers.conv2d(x, 16, 3)              # VALID, ELU
"""
from __future__ import annotations

import contextlib
import functools

from tfplus.train import get_global_step, get_or_create_global_step
from tfplus.unsupported import module_getattr

__all__ = ["get_global_step", "get_or_create_global_step", "arg_scope", "add_arg_scope", "has_arg_scope",
           "arg_scoped_arguments", "current_arg_scope"]

# The arg_scopes open now, innermost last: each maps a function's key to its default keyword arguments.
_STACK: list[dict] = [{}]


def _key(func) -> str:
    return getattr(func, "_key_op", str(func))


def current_arg_scope() -> dict:
    return _STACK[-1]


def has_arg_scope(func) -> bool:
    return hasattr(func, "_key_op")


def arg_scoped_arguments(func) -> list:
    """The arguments that an arg_scope may set for `func`."""
    return list(func._arg_names)


@contextlib.contextmanager
def arg_scope(list_ops_or_scope, **kwargs):
    """Within the block, the functions listed (each made with add_arg_scope) take `kwargs` as defaults, merged over
    those of the blocks around it; a call's own keyword arguments win. A dict (what `with arg_scope(...) as sc`
    gave) opens that scope again, as slim's nets' `*_arg_scope()` functions return it."""
    if isinstance(list_ops_or_scope, dict):
        if kwargs:
            raise ValueError("arg_scope: when a scope (a dict) is reused, no keyword arguments may be given")
        scope = dict(list_ops_or_scope)
    else:
        if not isinstance(list_ops_or_scope, (list, tuple)):
            raise TypeError("arg_scope: list_ops_or_scope must be a list or tuple of functions, or a scope (dict) "
                            f"to reuse, got {type(list_ops_or_scope).__name__}")
        scope = dict(current_arg_scope())
        for op in list_ops_or_scope:
            if not has_arg_scope(op):
                raise ValueError(f"arg_scope: {getattr(op, '__name__', op)} is not decorated with @add_arg_scope; "
                                 "decorate it with tf.contrib.framework.add_arg_scope")
            scope[_key(op)] = {**scope.get(_key(op), {}), **kwargs}
    _STACK.append(scope)
    try:
        yield scope
    finally:
        _STACK.pop()


def add_arg_scope(func):
    """Decorator: `func`'s keyword arguments take the defaults that the arg_scopes open at the call give it."""
    import inspect

    @functools.wraps(func)
    def with_args(*args, **kwargs):
        defaults = current_arg_scope().get(_key(with_args))
        return func(*args, **({**defaults, **kwargs} if defaults else kwargs))
    with_args._key_op = str(func)
    with_args._arg_names = [p for p in inspect.signature(func).parameters]
    return with_args


__getattr__ = module_getattr(__name__, "tf.contrib.framework")
