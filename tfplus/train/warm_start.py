"""tf.train.init_from_checkpoint: variables initialized from a checkpoint under a name map (TF1's semantics).

    w = tf.get_variable("new/w", [3, 2])
    tf.train.init_from_checkpoint("runs/pre", {"old/": "new/"})   # new/w's initializer now reads old/w
    sess.run(tf.global_variables_initializer())

The name-map rules live in `assignment_pairs`, which `tfplus train --init-map` (tfplus.finetune.init_from) shares.
"""
from __future__ import annotations

import os

from tfplus import errors
from tfplus.framework import get_default_graph
from tfplus.variables import Variable

__all__ = ["init_from_checkpoint", "warm_start"]


def assignment_pairs(assignment_map, variables: dict, ckpt_shapes: dict, where: str) -> list[tuple[str, str, list]]:
    """[(map key, {checkpoint name: variable})] for each entry of `assignment_map` ({checkpoint name or scope:
    variable name, scope or Variable}), by init_from_checkpoint's rules, over `variables` ({name: Variable},
    TensorFlow's variable store) and a checkpoint's {name: shape}. ValueError (TensorFlow's) for a checkpoint
    name that is missing or a variable name mapped from a scope; shapes are the caller's to check.

        >>> assignment_pairs({"old/": "new/"}, {"new/w": "W"}, {"old/w": [2]}, "ckpt")
        [('old/', {'old/w': 'W'})]
    """
    items = assignment_map.items() if hasattr(assignment_map, "items") else assignment_map
    pairs = []
    for ckpt_name, current in sorted(items, key=lambda item: item[0]):  # TensorFlow's order: by checkpoint name
        if isinstance(current, list) and current and all(isinstance(v, Variable) for v in current):
            raise NotImplementedError(f"init_from_checkpoint {ckpt_name!r}: a list of variables means a "
                                      "partitioned variable, which tfplus does not implement; map to one Variable")
        var = current if isinstance(current, Variable) else variables.get(current)
        if var is not None:  # one variable
            if ckpt_name not in ckpt_shapes:
                raise ValueError(f"Tensor {ckpt_name} is not found in {where} checkpoint "
                                 f"{_listing(ckpt_shapes)}")
            pairs.append((ckpt_name, {ckpt_name: var}))
            continue
        # A scope: every variable under `current`'s scope, named as in the checkpoint's scope `ckpt_name`.
        scopes = current[:current.rindex("/")] if "/" in current else ""
        if not ckpt_name.endswith("/"):
            raise ValueError(f"Assignment map with scope only name {scopes} should map to scope only "
                             f"{ckpt_name}. Should be 'scope/': 'other_scope/'.")
        found = {}
        for name in sorted(n for n in variables if not scopes or n.startswith(scopes + "/")):
            # NOTE: TensorFlow's arithmetic, quirks included: the root '/' keeps the name whole, and a scope
            # without '/' ('new' for 'new/') drops the name's first character.
            full = name[len(scopes):]
            if current != "/":
                full = full[1:]
            if ckpt_name != "/":
                full = ckpt_name + full
            full = full[:-1] if full.endswith("/") else full
            if full not in ckpt_shapes:
                raise ValueError(f"Tensor {full} ({name[len(scopes) + 1:]} in {ckpt_name}) is not found in "
                                 f"{where} checkpoint")
            found[full] = variables[name]
        pairs.append((ckpt_name, found))
    return pairs


def _listing(shapes: dict) -> str:
    names = sorted(shapes)
    return "{" + ", ".join(names[:20]) + (", ..." if len(names) > 20 else "") + "}"


def init_from_checkpoint(ckpt_dir_or_file: str, assignment_map) -> None:
    """Overrides the initializers of the variables `assignment_map` names so that they load a checkpoint's
    tensors (TensorFlow's tf.train.init_from_checkpoint; run it before tf.global_variables_initializer()).

    `assignment_map` maps checkpoint names to variables: {"old_scope/var": "new_scope/var"} (a name in
    tf.get_variable's store, or a Variable object), {"old_scope/": "new_scope/"} (every variable under the scope),
    {"/": "new_scope/"} or {"old_scope/": "/"} (the checkpoint's or the graph's root). Variables made by
    tf.Variable are not in the store: map them as objects. ValueError for a checkpoint name that is missing, a
    shape that differs, or a folder without a checkpoint; NotFoundError for a missing checkpoint file. The new
    initializers read the file with a RestoreV2 op, which runs on the host on every device (TensorFlow pins it to
    /cpu:0).

        >>> import tfplus as tf
        >>> with tf.Graph().as_default():
        ...     w = tf.get_variable("new/w", [2], initializer=tf.zeros_initializer())
        ...     tf.train.init_from_checkpoint("runs/pre", {"old/": "new/"})  # doctest: +SKIP
    """
    from tfplus import tensor_bundle
    from tfplus.ops import io_ops, state_ops
    from tfplus.train import saver
    path = ckpt_dir_or_file
    if os.path.isdir(ckpt_dir_or_file):
        path = saver.latest_checkpoint(ckpt_dir_or_file)
        if path is None:
            raise ValueError(f"Couldn't find 'checkpoint' file or checkpoints in given directory {ckpt_dir_or_file}")
    with saver.CheckpointReader(path) as reader:
        shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    if not tensor_bundle.is_bundle(path):  # the RestoreV2 initializer reads TensorFlow's format only
        raise ValueError(f"init_from_checkpoint: {path!r} is a checkpoint in tfplus's earlier one-file format; "
                         "save it again with tf.train.Saver(format='tensorflow') (the default)")
    graph = get_default_graph()
    store = {k: v for k, v in graph._var_store.items() if isinstance(v, Variable)}
    for _, found in assignment_pairs(assignment_map, store, shapes, ckpt_dir_or_file):
        for ckpt_name, var in found.items():
            if not var.shape.is_compatible_with(shapes[ckpt_name]):
                raise ValueError(f"Shape of variable {var.name} ({var.shape}) doesn't match with shape of tensor "
                                 f"{ckpt_name} ({shapes[ckpt_name]}) from checkpoint reader.")
            if dtypes[ckpt_name] is not var.dtype:
                raise errors.InvalidArgumentError(
                    var.op.name, "RestoreV2", f"checkpoint {path!r} holds {ckpt_name!r} as "
                    f"{getattr(dtypes[ckpt_name], 'name', dtypes[ckpt_name])} but the variable is {var.dtype.name}")
            # As TensorFlow: the variable's Assign now takes a RestoreV2 of the tensor, so any initializer built
            # afterwards (global_variables_initializer) loads the checkpoint when it runs.
            with graph.control_dependencies(None), graph.name_scope(var.op.name + "/"):
                value = io_ops.restore_v2(path, [ckpt_name], [""], [var.dtype], name="checkpoint_initializer")[0]
                value.set_shape(var.shape)
                var._initializer_op = state_ops.assign(var._ref(), value, name="Assign_checkpoint").op
            var._initial_value = value


def warm_start(ckpt_to_initialize_from: str, vars_to_warm_start=".*", var_name_to_vocab_info=None,
               var_name_to_prev_var_name=None) -> None:
    """tf.train.warm_start: init_from_checkpoint for the chosen variables, each from the checkpoint tensor of its
    own name or of var_name_to_prev_var_name's. `vars_to_warm_start`: a regular expression matched (from the
    start) against the trainable variables' names, a list of such expressions (or Variables) over all global
    variables, or None (none).

        >>> tf.train.warm_start("runs/pre", vars_to_warm_start="dense/")  # doctest: +SKIP
    """
    import re

    from tfplus.framework import GraphKeys
    if var_name_to_vocab_info:
        raise NotImplementedError("warm_start: var_name_to_vocab_info (remapping embedding rows by vocabulary) is "
                                  "not implemented in tfplus; warm-start those variables with a plain name map")
    graph = get_default_graph()
    if vars_to_warm_start is None:
        return
    if isinstance(vars_to_warm_start, str):
        chosen = graph.get_collection(GraphKeys.TRAINABLE_VARIABLES, scope=vars_to_warm_start)
    else:
        everything = graph.get_collection(GraphKeys.GLOBAL_VARIABLES)
        chosen = [v for pattern in vars_to_warm_start for v in
                  ([pattern] if isinstance(pattern, Variable) else
                   [v for v in everything if re.match(pattern, v.op.name)])]
    prev = var_name_to_prev_var_name or {}
    init_from_checkpoint(ckpt_to_initialize_from, {prev.get(v.op.name, v.op.name): v for v in chosen})
