"""The Mentee CNN (5 conv + 3 FC) for CIFAR-10, and the training graph around any model builder.

    import tfplus as tf
    from tfplus.graphs.mentee import mentee, training_graph

    images = tf.placeholder(tf.float32, [None, 3, 32, 32])
    logits = mentee(images)                       # (?, 10); variables conv1/weights .. fc3/biases

    tg = training_graph(total_steps=5850, seed=0)  # placeholders, loss, accuracy, train_op in a new graph
    with tf.Session(graph=tg.graph) as sess:
        sess.run(tg.init_op)
        sess.run([tg.train_op, tg.loss], {tg.images: x, tg.labels: y})

Default Mentee: conv3x3 SAME 32, 32, pool, 64, 64, pool, 128, pool, then FC 2048-256-128-10; ReLU after
every conv and between the FCs; He-normal weights, zero biases. No dropout or batch norm, so a training step
draws no random numbers and a resumed run repeats an uninterrupted one exactly.
"""
from __future__ import annotations

import inspect
import math
from typing import Callable, NamedTuple, Sequence

import tfplus as tf
import tfplus.train  # noqa: F401  makes tf.train available while tfplus/__init__.py does not import it
from tfplus import finetune

# TF1's tf.GraphKeys.WEIGHTS: the collection weight decay is applied to (biases are left out).
WEIGHTS = "weights"

DATA_FORMATS = ("NCHW", "NHWC")
OPTIMIZERS = ("momentum", "sgd", "adam")
SCHEDULES = ("cosine", "step", "const")
# Used when no learning rate is given: the Mentee recipe for SGD, Adam's usual default for Adam.
DEFAULT_LR = {"momentum": 0.05, "sgd": 0.05, "adam": 0.001}


# -- layers ------------------------------------------------------------------------------------------------
def _channels(x: tf.Tensor, data_format: str) -> int:
    shape = x.shape.as_list()
    c = shape[1] if data_format == "NCHW" else shape[-1]
    if c is None:
        raise ValueError(f"'{x.name}' {x.shape}: the channel dimension must be known to size the next layer")
    return c


def decay(w: tf.Variable) -> None:
    """Puts w in the WEIGHTS collection (weight decay) once.

    NOTE: a model with batch norm is built twice on the same variables (training and evaluation logits,
    training_graph); adding w again would count it twice in the L2 loss, doubling its weight decay.
    """
    if all(v is not w for v in tf.get_collection(WEIGHTS)):
        tf.add_to_collection(WEIGHTS, w)


def conv_relu(x: tf.Tensor, name: str, filters: int, ksize: int = 3, padding: str = "SAME",
              data_format: str = "NCHW") -> tf.Tensor:
    """relu(conv2d(x, W) + b) with W (ksize, ksize, in, filters) He-normal and b zero, under scope `name`."""
    with tf.variable_scope(name):
        w = tf.get_variable("weights", [ksize, ksize, _channels(x, data_format), filters],
                            initializer=tf.initializers.he_normal())
        b = tf.get_variable("biases", [filters], initializer=tf.zeros_initializer())
        decay(w)
        y = tf.nn.conv2d(x, w, strides=[1, 1, 1, 1], padding=padding, data_format=data_format)
        return tf.nn.relu(tf.nn.bias_add(y, b, data_format=data_format))


def max_pool_2x2(x: tf.Tensor, data_format: str = "NCHW") -> tf.Tensor:
    """2x2 max-pool with stride 2: halves height and width."""
    window = [1, 1, 2, 2] if data_format == "NCHW" else [1, 2, 2, 1]
    return tf.nn.max_pool(x, ksize=window, strides=window, padding="VALID", data_format=data_format)


def flatten(x: tf.Tensor) -> tf.Tensor:
    """(N, ...) -> (N, prod(...)); the feature dims must be known."""
    dims = x.shape.as_list()[1:]
    if None in dims:
        raise ValueError(f"'{x.name}' {x.shape}: flatten needs known feature dimensions (fixed-size images)")
    return tf.reshape(x, [-1, math.prod(dims)])


def dense(x: tf.Tensor, name: str, units: int, relu: bool = True) -> tf.Tensor:
    """x @ W + b (then ReLU unless relu=False) with W (in, units) He-normal and b zero, under scope `name`."""
    with tf.variable_scope(name):
        w = tf.get_variable("weights", [x.shape.as_list()[1], units], initializer=tf.initializers.he_normal())
        b = tf.get_variable("biases", [units], initializer=tf.zeros_initializer())
        decay(w)
        y = tf.nn.bias_add(tf.matmul(x, w), b)
        return tf.nn.relu(y) if relu else y


def _check_data_format(data_format: str) -> None:
    if data_format not in DATA_FORMATS:
        raise ValueError(f"data_format must be one of {DATA_FORMATS}, got {data_format!r}")


# -- Mentee --------------------------------------------------------------------------------------------------
def default_pools(depth: int) -> tuple[int, ...]:
    """Conv layers (0-based) followed by a 2x2 max-pool: every second one, and the last.

        default_pools(5) == (1, 3, 4)     # 32, 32, pool, 64, 64, pool, 128, pool
    """
    return tuple(sorted({i for i in range(depth) if i % 2 == 1} | {depth - 1}))


def mentee(images: tf.Tensor, conv_widths: Sequence[int] = (32, 32, 64, 64, 128),
           fc_widths: Sequence[int] = (256, 128), num_classes: int = 10, pools: Sequence[int] | None = None,
           data_format: str = "NCHW") -> tf.Tensor:
    """Mentee logits (N, num_classes) for images (N, C, H, W) (or (N, H, W, C) with data_format='NHWC').

    conv_widths sets the number and width of the 3x3 conv layers (scopes conv1, conv2, ...); pools lists the
    conv layers (0-based) followed by a 2x2 max-pool (default: default_pools(depth)); fc_widths are the hidden
    FC layers (scopes fc1, fc2, ...), and a last FC layer gives the logits.

        logits = mentee(images, conv_widths=(16, 16, 32, 32, 64), fc_widths=(128, 64))
    """
    _check_data_format(data_format)
    if not conv_widths:
        raise ValueError("mentee: conv_widths must name at least one conv layer")
    pools = default_pools(len(conv_widths)) if pools is None else tuple(pools)
    bad = [p for p in pools if not 0 <= p < len(conv_widths)]
    if bad:
        raise ValueError(f"mentee: pools {bad} are not conv layer indices 0..{len(conv_widths) - 1}")
    x = images
    for i, width in enumerate(conv_widths):
        x = conv_relu(x, f"conv{i + 1}", width, data_format=data_format)
        if i in pools:
            x = max_pool_2x2(x, data_format)
    x = flatten(x)
    for i, width in enumerate(fc_widths):
        x = dense(x, f"fc{i + 1}", width)
    return dense(x, f"fc{len(fc_widths) + 1}", num_classes, relu=False)


# -- the training graph --------------------------------------------------------------------------------------
class TrainGraph(NamedTuple):
    """The handles a training loop needs; all in `graph`."""
    graph: tf.Graph
    images: tf.Tensor          # placeholder float32 (None, 3, 32, 32) (NHWC: (None, 32, 32, 3))
    labels: tf.Tensor          # placeholder int32 (None,)
    logits: tf.Tensor
    predictions: tf.Tensor     # int32 argmax of the logits (of the evaluation-mode logits for batch norm)
    cross_entropy: tf.Tensor   # mean sparse softmax cross-entropy
    loss: tf.Tensor            # cross_entropy + weight_decay * sum(l2_loss(weights))
    accuracy: tf.Tensor        # fraction of the batch predicted right (by the training-mode logits)
    learning_rate: tf.Tensor   # the rate this step uses (a function of global_step)
    global_step: tf.Variable
    train_op: tf.Operation
    init_op: tf.Operation
    # With device_input: `images` is computed from these by CifarAugment on the session's device.
    raw_images: tf.Tensor | None = None    # placeholder uint8 (None, 3, 32, 32), the dataset's bytes
    crops: tf.Tensor | None = None         # placeholder int32 (None, 3): top, left, flip per image
    eval_logits: tf.Tensor | None = None   # the predictions' logits (evaluation mode for batch norm)


def default_warmup(steps_per_epoch: int) -> int:
    """Warm-up steps when none are given: one epoch, however short the run.

    NOTE: a run shorter than an epoch so never leaves its warm-up. That is the point: what makes the start
    safe is the number of small steps (see learning_rate_schedule), not a fraction of the run; a warm-up
    capped at half of a 6-step run reached the full rate at step 3 and the loss jumped from 4.7 to 15.6.
    """
    return steps_per_epoch


def learning_rate_schedule(schedule: str, learning_rate: float, global_step, total_steps: int,
                           warmup_steps: int = 0):
    """The learning rate as a function of global_step: over the first warmup_steps steps it rises linearly,
    learning_rate * (step + 1) / warmup_steps, to the peak; then 'cosine' decays it to 0 over the remaining
    steps (to total_steps), as Keras's CosineDecay(warmup_steps=...) and PyTorch's warm-up-then-cosine
    schedules do, 'step' divides it by 10 at 50% and again at 75% of the run, 'const' keeps it.

    NOTE: without a warm-up, Mentee's He-normal start at learning rate 0.05 diverges or dies (all ReLUs off,
    loss stuck) within its first ~10 steps for most seeds, and so does a 6-step warm-up; one epoch of warm-up
    (390 steps) trains every seed tried.
    """
    if schedule == "cosine":
        # NOTE: after the warm-up, not over the whole run: a cosine scaled by the ramp peaked at 26% of the rate
        # in a one-epoch run (warm-up one epoch). The ramp below leaves it unchanged from warmup_steps on.
        decay_steps = max(total_steps - warmup_steps, 1)
        lr = tf.train.cosine_decay(learning_rate, tf.maximum(global_step - warmup_steps, 0), decay_steps)
    elif schedule == "step":
        boundaries = [max(1, total_steps // 2), max(2, 3 * total_steps // 4)]
        lr = tf.train.piecewise_constant(global_step, boundaries,
                                         [learning_rate, learning_rate / 10, learning_rate / 100])
    elif schedule == "const":
        lr = tf.constant(learning_rate, tf.float32)
    else:
        raise ValueError(f"unknown schedule {schedule!r}; use one of {SCHEDULES}")
    if warmup_steps > 0:
        ramp = (tf.cast(global_step, tf.float32) + 1.0) / float(warmup_steps)
        lr = lr * tf.minimum(ramp, 1.0)
    return tf.identity(lr, name="learning_rate")


def make_optimizer(name: str, learning_rate, momentum: float = 0.9, nesterov: bool = True):
    """'momentum' (Nesterov by default), 'sgd' or 'adam'."""
    if name == "momentum":
        return tf.train.MomentumOptimizer(learning_rate, momentum, use_nesterov=nesterov)
    if name == "sgd":
        return tf.train.GradientDescentOptimizer(learning_rate)
    if name == "adam":
        return tf.train.AdamOptimizer(learning_rate)
    raise ValueError(f"unknown optimizer {name!r}; use one of {OPTIMIZERS}")


def frozen_batch_norm(model: Callable[..., tf.Tensor], images: tf.Tensor, data_format: str, kwargs: dict,
                      var_list: Callable[[list[tf.Variable]], list[tf.Variable]]) -> frozenset[str]:
    """The scopes of the batch-norm layers (those with a moving_mean) that have trainable variables of which
    var_list picks none. Learnt from a build of the model in a scratch graph, as var_list picks by name."""
    with tf.Graph().as_default():
        x = tf.placeholder(images.dtype, images.shape.as_list())
        model(x, data_format=data_format, training=True, **kwargs)
        every = tf.trainable_variables()
        chosen = {v.op.name for v in var_list(every)}
        scopes = [v.op.name[:-len("/moving_mean")] for v in tf.global_variables()
                  if v.op.name.endswith("/moving_mean")]
    frozen = []
    for scope in scopes:
        own = {v.op.name for v in every if v.op.name.startswith(scope + "/")}
        if own and not own & chosen:
            frozen.append(scope)
    return frozenset(frozen)


def _model_logits(model: Callable[..., tf.Tensor], images, data_format: str, kwargs: dict,
                  frozen: frozenset[str] = frozenset()):
    """(training logits, evaluation logits). A model with a `training` argument (batch norm) is built twice:
    training=True for the loss (False for the batch-norm layers in `frozen`: moving statistics, no updates),
    and training=False (moving statistics, shared variables, under name scope 'eval') for the predictions; any
    other model once, for both."""
    if "training" not in inspect.signature(model).parameters:
        logits = model(images, data_format=data_format, **kwargs)
        return logits, logits
    training = (lambda scope: scope not in frozen) if frozen else True
    logits = model(images, data_format=data_format, training=training, **kwargs)
    with tf.variable_scope(tf.get_variable_scope(), reuse=True), tf.name_scope("eval"):
        return logits, model(images, data_format=data_format, training=False, **kwargs)


def _device_input(images: tf.Tensor, data_format: str) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(augmented images, raw_images, crops): the readers of the `images` placeholder read CifarAugment's output
    instead. NOTE: made last, and the readers rewired, because random ops are seeded by the number of ops before
    them: the model's initial weights stay those of a host-input graph of the same seed."""
    from tfplus.data import MEAN, STD
    from tfplus.ops.image_ops import cifar_augment
    dims = images._shape
    c, h, w = dims[1:] if data_format == "NCHW" else (dims[3], dims[1], dims[2])
    raw_images = tf.placeholder(tf.uint8, [None, c, h, w], name="raw_images")
    crops = tf.placeholder(tf.int32, [None, 3], name="crops")
    augmented = cifar_augment(raw_images, crops, 1 / (255 * STD), MEAN / STD, data_format=data_format,
                              name="augmented_images")
    for op in list(images.consumers()):
        for i, t in enumerate(op.inputs):
            if t is images:
                op._update_input(i, augmented)
    return augmented, raw_images, crops


def training_graph(model: Callable[..., tf.Tensor] = mentee, *, total_steps: int, seed: int = 0,
                   optimizer: str = "momentum", learning_rate: float | None = None, momentum: float = 0.9,
                   nesterov: bool = True, weight_decay: float = 5e-4, schedule: str = "cosine",
                   warmup_steps: int = 0, data_format: str = "NCHW", image_shape: Sequence[int] = (3, 32, 32),
                   model_kwargs: dict | None = None,
                   var_list: Callable[[list[tf.Variable]], list[tf.Variable]] | None = None,
                   device_input: bool = False,
                   wrap_optimizer: Callable[[tf.train.Optimizer], tf.train.Optimizer] | None = None) -> TrainGraph:
    """A new graph with placeholders, `model`'s logits, loss, accuracy and an optimizer step.

    loss = mean sparse softmax cross-entropy + weight_decay * sum(l2_loss(w)) over the WEIGHTS collection; as
    l2_loss(w) = sum(w^2) / 2, weight decay adds weight_decay * w to each weight's gradient (PyTorch's
    weight_decay=weight_decay on the weights only). The learning rate follows `schedule` over total_steps
    after warmup_steps of linear warm-up (learning_rate_schedule); train_op increments global_step. `seed` is
    the graph seed: the same seed gives the same initial weights. `var_list` (fine-tuning) picks the variables
    to train from the model's trainable ones (e.g. tfplus.finetune.select_trainable); the rest are frozen, and
    a batch-norm layer none of whose variables trains runs in inference mode (frozen_batch_norm): it normalizes
    with its moving statistics and does not update them, as Keras's BatchNormalization(trainable=False); the
    convolutions below the trained layers get a smaller cpu scratch (finetune.shrink_forward_scratch).
    `device_input` feeds uint8 images and per-image crops instead (raw_images, crops), augmented and normalized
    in the graph (tfplus.ops.image_ops.cifar_augment, pad 4), so the floats are made where the model runs.
    `wrap_optimizer` wraps the optimizer (tfplus.distributed.DistributedOptimizer).

        tg = training_graph(mentee, total_steps=100, seed=0, model_kwargs={"conv_widths": (8, 8, 16, 16, 32)})
    """
    _check_data_format(data_format)
    if total_steps < 1:
        raise ValueError(f"training_graph: total_steps must be >= 1, got {total_steps}")
    if learning_rate is None:
        learning_rate = DEFAULT_LR.get(optimizer, 0.0)  # an unknown optimizer fails in make_optimizer
    c, h, w = image_shape
    graph = tf.Graph()
    with graph.as_default():
        tf.set_random_seed(seed)
        images = tf.placeholder(tf.float32, [None, c, h, w] if data_format == "NCHW" else [None, h, w, c],
                                name="images")
        labels = tf.placeholder(tf.int32, [None], name="labels")
        kwargs = model_kwargs or {}
        frozen = frozen_batch_norm(model, images, data_format, kwargs, var_list) \
            if var_list and "training" in inspect.signature(model).parameters else frozenset()
        logits, eval_logits = _model_logits(model, images, data_format, kwargs, frozen)
        with tf.name_scope("loss"):
            per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
            xent = tf.reduce_mean(per_example, name="cross_entropy")
            weights = tf.get_collection(WEIGHTS)
            loss = xent
            if weight_decay and weights:
                l2 = tf.add_n([tf.nn.l2_loss(v) for v in weights], name="l2")
                loss = tf.add(xent, weight_decay * l2, name="total")
        with tf.name_scope("accuracy"):
            predictions = tf.cast(tf.argmax(eval_logits, axis=1), tf.int32, name="predictions")
            batch_predictions = predictions if eval_logits is logits else \
                tf.cast(tf.argmax(logits, axis=1), tf.int32, name="batch_predictions")
            accuracy = tf.reduce_mean(tf.cast(tf.equal(batch_predictions, labels), tf.float32), name="accuracy")
        global_step = tf.train.get_or_create_global_step()
        with tf.name_scope("schedule"):
            lr = learning_rate_schedule(schedule, learning_rate, global_step, total_steps, warmup_steps)
        # The model's UPDATE_OPS (batch norm's moving averages) run with every training step, as in TF1.
        with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
            train_vars = var_list(tf.trainable_variables()) if var_list else None
            opt = make_optimizer(optimizer, lr, momentum, nesterov)
            train_op = (wrap_optimizer(opt) if wrap_optimizer else opt).minimize(
                loss, global_step=global_step, var_list=train_vars, name="train_op")
        if train_vars is not None:  # frozen layers below the trained ones run forward only
            finetune.shrink_forward_scratch(graph, train_vars)
        init_op = tf.global_variables_initializer()
        raw_images = crops = None
        if device_input:
            images, raw_images, crops = _device_input(images, data_format)
    return TrainGraph(graph, images, labels, logits, predictions, xent, loss, accuracy, lr, global_step,
                      train_op, init_op, raw_images, crops, eval_logits)
