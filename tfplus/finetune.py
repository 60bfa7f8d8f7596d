"""Fine-tuning: which variables train (a model's layers, a regex), and starting from another run's checkpoint.

    from tfplus import finetune
    layers = finetune.model_layers(tf.trainable_variables())          # [('conv1', [w, b]), ..., ('fc3', [w, b])]
    train_vars = finetune.select_trainable(tf.trainable_variables(), fine_tune_last=1)   # fc3's
    opt.minimize(loss, var_list=train_vars)         # the rest is frozen: no gradient, no optimizer slot
    init = finetune.init_from(model_vars, "runs/pretrained")   # made before the session
    init = finetune.init_from(model_vars, "runs/keras", {"keras_scope/": "/"})   # names mapped, as TF1's
    init.restore(sess)                              # after the initializer; init.skipped says what was not

A layer is a top-level variable scope of the model builders in tfplus.graphs (conv1 .. fc3 in Mentee; conv0,
block1 .. block13 and logits in MobileNet, a block being its depthwise and pointwise convolutions), in the
order the model creates them: the last layer is the one nearest the loss.
"""
from __future__ import annotations

import dataclasses
import re

from tfplus import errors

try:  # NOTE: the regex parser is private to `re`; it is what tells a pattern's structure reliably
    from re import _constants as _sre
    from re import _parser as _sre_parse
except ImportError:  # Python 3.10
    import sre_constants as _sre  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

# A --trainable pattern (also read back from a checkpoint's recipe, which may come from elsewhere) is matched
# against every variable name by Python's backtracking engine, which has no time limit: a repeat around something
# that itself repeats or has alternatives, e.g. (a+)+$ or (ab|a)*$, takes exponential time, many repeats in a row
# a high power of the name's length, and back references are harder still. Names need none of these.
MAX_PATTERN_CHARS = 256
MAX_PATTERN_REPEATS = 3
_REPEATS = {_sre.MAX_REPEAT, _sre.MIN_REPEAT, getattr(_sre, "POSSESSIVE_REPEAT", _sre.MAX_REPEAT)}


def check_pattern(pattern: str | None) -> None:
    """ValueError unless `pattern` (a --trainable regex; None: none) is valid and safe to match: at most
    MAX_PATTERN_CHARS characters and MAX_PATTERN_REPEATS repeats (*, +, {m,n}), none around a group that repeats
    or has alternatives (a character class is fine: ([a-z]|_)+ parses as one), no back reference.

        >>> check_pattern("^(fc3|logits)/")
        >>> check_pattern("(a+)+$")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ValueError: --trainable '(a+)+$' repeats a group that itself repeats: matching it could take hours; ...
    """
    if pattern is None:
        return
    if not isinstance(pattern, str):
        raise ValueError(f"--trainable must be a regular expression, got {type(pattern).__name__}")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"--trainable is {len(pattern)} characters long; at most {MAX_PATTERN_CHARS} are allowed")
    try:
        parsed = _sre_parse.parse(pattern)
    except (re.error, RecursionError, OverflowError) as e:
        raise ValueError(f"--trainable {pattern!r} is not a valid regular expression ({e})") from None
    repeats: list = []
    problem = _unsafe(parsed, False, repeats)
    if problem is None and len(repeats) > MAX_PATTERN_REPEATS:
        problem = f"has {len(repeats)} repeats (*, +, {{m,n}}), more than {MAX_PATTERN_REPEATS}"
    if problem is not None:
        raise ValueError(f"--trainable {pattern!r} {problem}: matching it could take hours; name the variables "
                         "more simply, e.g. '^(conv3|fc)'")


def _unsafe(sub, in_repeat: bool, repeats: list) -> str | None:
    """What makes the parsed pattern `sub` unsafe to match (None if nothing); counts its repeats into `repeats`."""
    for op, av in sub:
        if op in _REPEATS:
            low, high, body = av
            if high > 1:
                if in_repeat:
                    return "repeats a group that itself repeats"
                repeats.append(op)
            inner = [body]
        elif op is _sre.BRANCH:
            if in_repeat:
                return "repeats a group with alternatives"
            inner = av[1]
        elif op in (_sre.GROUPREF, _sre.GROUPREF_EXISTS):
            return "uses a back reference"
        elif op is _sre.SUBPATTERN:
            inner = [av[-1]]
        elif op in (_sre.ASSERT, _sre.ASSERT_NOT):
            inner = [av[1]]
        elif op is getattr(_sre, "ATOMIC_GROUP", None):
            inner = [av]
        else:
            continue
        for part in inner:
            problem = _unsafe(part, in_repeat or op in _REPEATS and av[1] > 1, repeats)
            if problem is not None:
                return problem
    return None


def model_layers(variables) -> list[tuple[str, list]]:
    """[(layer name, its variables)] in creation order: the variables grouped by the first part of their name."""
    layers: dict[str, list] = {}
    for v in variables:
        layers.setdefault(v.op.name.split("/", 1)[0], []).append(v)
    return list(layers.items())


def select_trainable(variables, trainable: str | None = None, fine_tune_last: int | None = None) -> list:
    """The variables to train: those whose name matches the regex `trainable` (re.search), or those of the last
    `fine_tune_last` layers (model_layers), or all if neither is given. ValueError for a regex that is invalid,
    unsafe (check_pattern) or matches nothing, for N out of range, or for both options at once."""
    variables = list(variables)
    if trainable is not None and fine_tune_last is not None:
        raise ValueError("give --trainable or --fine-tune-last, not both")
    if trainable is not None:
        check_pattern(trainable)
        pattern = re.compile(trainable)
        chosen = [v for v in variables if pattern.search(v.op.name)]
        if not chosen:
            names = ", ".join(v.op.name for v in variables[:12]) + (", ..." if len(variables) > 12 else "")
            raise ValueError(f"--trainable {trainable!r} matches no trainable variable; the model has: {names}")
        return chosen
    if fine_tune_last is not None:
        layers = model_layers(variables)
        if not 1 <= fine_tune_last <= len(layers):
            raise ValueError(f"--fine-tune-last {fine_tune_last} is out of range: the model has {len(layers)} "
                             f"layers ({', '.join(name for name, _ in layers)}); give 1..{len(layers)}")
        return [v for _, vs in layers[-fine_tune_last:] for v in vs]
    return variables


@dataclasses.dataclass
class InitFrom:
    """What init_from found: a Saver over the matching variables (None if none match), the checkpoint file,
    the names restored, [(name, reason)] for the variables left at their initial values, and {name: checkpoint
    name} for those restored from another name (the assignment map's)."""
    saver: object
    path: str
    restored: list[str]
    skipped: list[tuple[str, str]]
    renamed: dict[str, str] = dataclasses.field(default_factory=dict)

    def restore(self, sess) -> None:
        """Loads the matching variables (run it after the initializer, which sets the others)."""
        if self.saver is not None:
            self.saver.restore(sess, self.path)


def init_from(variables, ckpt_dir_or_file: str, assignment_map: dict[str, str] | None = None) -> InitFrom:
    """Matches `variables` (in the default graph) against a tfplus checkpoint file, or a folder's latest one, by
    name and shape, and builds the Saver that restores those that match. `assignment_map` ({checkpoint name or
    scope: variable name or scope}, tf.train.init_from_checkpoint's rules) names where the variables it covers
    come from; the others keep their own names. Reasons for the variables not restored: 'missing' (not in the
    checkpoint) or 'shape mismatch: checkpoint [..], model [..]' (they keep their initial values, as a new head
    should). ValueError naming the path for a checkpoint that is missing, unreadable or corrupt, and naming the
    entry for a map entry that names a missing checkpoint tensor or no variable."""
    import os

    from tfplus import train
    from tfplus.train.warm_start import assignment_pairs
    path = train.latest_checkpoint(ckpt_dir_or_file) if os.path.isdir(ckpt_dir_or_file) else ckpt_dir_or_file
    if path is None:
        raise ValueError(f"--init-from {ckpt_dir_or_file}: the folder holds no checkpoint")
    try:
        saved = dict(train.list_variables(path))
    except (OSError, errors.OpError, ValueError) as e:
        raise ValueError(f"--init-from {ckpt_dir_or_file}: cannot read the checkpoint: {e}") from None
    variables = list(variables)
    source = {}  # variable name -> checkpoint name, for the variables the map covers
    try:
        pairs = assignment_pairs(assignment_map or {}, {v.op.name: v for v in variables}, saved, ckpt_dir_or_file)
    except ValueError as e:  # TensorFlow's words, e.g. "Tensor old/w is not found in ... checkpoint"
        raise ValueError(f"--init-map: {e}") from None
    for key, found in pairs:
        if not found:
            raise ValueError(f"--init-map {key}={assignment_map[key]}: no model variable is under "
                             f"{assignment_map[key]!r}")
        source.update({v.op.name: name for name, v in found.items()})
    matched, restored, skipped = {}, [], []
    for v in variables:
        name, shape = v.op.name, v.shape.as_list()
        key = source.get(name, name)
        what = "checkpoint" if key == name else f"checkpoint {key}"
        if key not in saved:
            skipped.append((name, "missing"))
        elif list(saved[key]) != shape:
            skipped.append((name, f"shape mismatch: {what} {list(saved[key])}, model {shape}"))
        else:
            matched[key] = v
            restored.append(name)
    saver = train.Saver(var_list=matched, max_to_keep=None) if matched else None
    return InitFrom(saver, path, restored, skipped, {n: k for n, k in source.items() if k != n and n in restored})


# The cpu conv kernels' scratch divisor for convolutions that run forward only. The kernels then fill their
# im2col columns a quarter of the batch at a time: a quarter of the scratch at no cost in time (measured on
# Mentee's fine-tuning step: 0.22 s vs 0.25 s CPU, the smaller pieces stay in cache), in the plan without a
# budget; a budget may still divide it further (planner.chunking).
FORWARD_SCRATCH_DIVISOR = 4


def shrink_forward_scratch(graph, trained, divisor: int = FORWARD_SCRATCH_DIVISOR) -> list:
    """Gives every Conv2D of `graph` that no variable in `trained` feeds (below the lowest trained layer:
    it runs forward only, and keeps nothing for backward) the scratch divisor attr of planner.chunking, and
    returns those ops. What the planner and the cpu kernels then do is exact: the same arithmetic per image.

        train_op = opt.minimize(loss, var_list=train_vars)
        finetune.shrink_forward_scratch(tf.get_default_graph(), train_vars)
    """
    from tfplus.planner.chunking import SCRATCH_ATTR
    sources = {v.op for v in trained}
    fed: set = set()   # the ops that read a trained variable, directly or through other ops
    shrunk = []
    for op in graph.get_operations():  # creation order: an op's inputs come before it
        if op in sources or any(t.op in fed for t in op.inputs):
            fed.add(op)
        elif op.type == "Conv2D":
            op.attrs[SCRATCH_ATTR] = divisor
            shrunk.append(op)
    return shrunk
