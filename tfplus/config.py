"""TF1's session configuration: tf.ConfigProto and the option messages it holds, as plain objects.

TF1 programs build these and pass them to tf.Session(config=...). Every field TF1 code commonly sets is
accepted; the cpu device honours the thread counts (intra_op_parallelism_threads: tfplus.threads) and
allow_soft_placement; the others are kept (and printed) but change nothing here: tfplus places every op on
the session's device and manages device memory itself; its only graph rewrite is op fusion
(tfplus.engine.rewrite).

    >>> import tfplus as tf
    >>> config = tf.ConfigProto(intra_op_parallelism_threads=2, allow_soft_placement=True)
    >>> config.gpu_options.allow_growth = True
    >>> config.intra_op_parallelism_threads
    2
"""
from __future__ import annotations

from typing import Any


class _Options:
    """A message: keyword fields with defaults; an unknown field is an error that lists the known ones."""

    _fields: dict[str, Any] = {}

    def __init__(self, **fields):
        for name, default in self._fields.items():
            object.__setattr__(self, name, default() if callable(default) else default)
        for name, value in fields.items():
            setattr(self, name, value)

    def __setattr__(self, name, value):
        if name not in self._fields:
            raise TypeError(f"tf.{type(self).__name__} has no field {name!r}; its fields: "
                            f"{', '.join(self._fields)}")
        object.__setattr__(self, name, value)

    def __eq__(self, other):
        return type(other) is type(self) and vars(other) == vars(self)

    def __repr__(self):
        changed = {k: v for k, v in vars(self).items() if v != _default(self._fields[k])}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in changed.items())})"


def _default(value):
    return value() if callable(value) else value


class GPUOptions(_Options):
    """TF1's GPUOptions. Accepted for compatibility: the opencl device sizes its memory by the memory planner."""

    _fields = {"allow_growth": False, "per_process_gpu_memory_fraction": 0.0, "visible_device_list": "",
               "allocator_type": "", "force_gpu_compatible": False}


class OptimizerOptions(_Options):
    """TF1's OptimizerOptions (graph-level optimizations). Accepted; tfplus runs graphs as built."""

    L1, L0 = 0, -1  # opt_level
    DEFAULT, OFF, ON_1, ON_2 = 0, -1, 1, 2  # global_jit_level
    _fields = {"opt_level": 0, "do_common_subexpression_elimination": False, "do_constant_folding": False,
               "do_function_inlining": False, "global_jit_level": 0, "max_folded_constant_in_bytes": 0}


class RewriterConfig(_Options):
    """TF1's RewriterConfig (grappler). `remapping` (op fusion, tfplus.engine.rewrite) is honoured: OFF runs graphs
    as built; the other fields are accepted."""

    DEFAULT, ON, OFF = 0, 1, 2  # Toggle
    _fields = {"remapping": 0, "constant_folding": 0, "arithmetic_optimization": 0, "layout_optimizer": 0,
               "memory_optimization": 0, "disable_meta_optimizer": False}


class GraphOptions(_Options):
    """TF1's GraphOptions. rewrite_options.remapping turns the graph rewrite (tfplus.engine.rewrite) off; the
    other fields are accepted."""

    _fields = {"rewrite_options": RewriterConfig,
               "optimizer_options": OptimizerOptions, "enable_bfloat16_sendrecv": False, "build_cost_model": 0,
               "infer_shapes": False, "place_pruned_graph": False, "enable_recv_scheduling": False,
               "timeline_step": 0}


class ConfigProto(_Options):
    """TF1's ConfigProto. intra_op_parallelism_threads is the cpu device's thread count (0: the default,
    $TFPLUS_NUM_THREADS or every core this process may use); inter_op_parallelism_threads > 1 runs independent
    ops of a cpu step at once, each still using the intra-op threads (0 or 1: one after another)."""

    _fields = {"intra_op_parallelism_threads": 0, "inter_op_parallelism_threads": 0,
               "allow_soft_placement": False, "log_device_placement": False, "device_count": dict,
               "gpu_options": GPUOptions, "graph_options": GraphOptions, "operation_timeout_in_ms": 0,
               "use_per_session_threads": False, "isolate_session_state": False}

    def __setattr__(self, name, value):
        if name in ("intra_op_parallelism_threads", "inter_op_parallelism_threads"):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"tf.ConfigProto({name}={value!r}): a thread count is an integer >= 0 "
                                 "(0 means the default)")
        super().__setattr__(name, value)


def field(config, name: str, default=None):
    """A session config's field: `config` is a ConfigProto, a dict of its fields, or None."""
    if isinstance(config, dict):
        return config.get(name, default)
    return getattr(config, name, default)
