"""A clear error for the TF1 names tfplus lacks: `tf.<name>`, `tf.nn.<name>`, `tf.train.<name>`, ... raise
UnsupportedError ("tfplus does not implement tf.nn.lrn ...", with the nearest supported alternative where
there is one) at the line of the script that asks, instead of an AttributeError deep inside it.

Each TF1-style module ends with

    from tfplus.unsupported import module_getattr
    __getattr__ = module_getattr(__name__, "tf.nn")
"""
from __future__ import annotations


class UnsupportedError(AttributeError, NotImplementedError):
    """A TF1 API that tfplus does not implement. An AttributeError, so `hasattr(tf, name)` stays False, and a
    NotImplementedError, which is what it means."""


# The canned estimators tfplus lacks (it has the DNN and linear ones over numeric columns).
_CANNED = ("tf.estimator.Estimator with a model_fn that builds the same network with tf.layers (dense layers on the "
           "features' arrays) and returns a tf.estimator.EstimatorSpec")

# Full TF1 name -> the nearest thing tfplus has (or what to do instead).
ALTERNATIVES = {
    "tf.contrib.slim.losses": "tf.losses, whose functions take (labels, logits): slim.losses' took (logits, labels)",
    "tf.contrib.slim.learning": "a loop of Session.run(train_op) in a tf.train.MonitoredTrainingSession",
    "tf.contrib.slim.nets": "the network written with slim's layers (slim.conv2d, slim.max_pool2d, ...)",
    "tf.contrib.learn": "tf.layers with tf.train.MonitoredTrainingSession",
    "tf.estimator.DNNLinearCombinedClassifier": _CANNED,
    "tf.estimator.DNNLinearCombinedRegressor": _CANNED,
    "tf.estimator.BoostedTreesClassifier": _CANNED,
    "tf.estimator.BoostedTreesRegressor": _CANNED,
    "tf.estimator.BaselineClassifier": _CANNED,
    "tf.estimator.BaselineRegressor": _CANNED,
    "tf.layers.Layer": "tf.layers' functions or classes (Dense, Conv2D, ...), or variables of your own with "
                       "tf.get_variable",
    "tf.layers.separable_conv1d": "tf.layers.conv1d",
    "tf.contrib.seq2seq.dynamic_decode": "a tf.while_loop over an RNN cell, or tf.nn.dynamic_rnn",
    "tf.contrib.seq2seq.TrainingHelper": "tf.nn.dynamic_rnn over the target embeddings (teacher forcing)",
    "tf.contrib.seq2seq.BasicDecoder": "tf.nn.dynamic_rnn, then tf.layers.dense on its outputs",
    "tf.contrib.seq2seq.BahdanauAttention": "attention written out in a loop over an RNN cell: scores v . tanh(W1 "
                                            "keys + W2 query), tf.nn.softmax, the weighted sum of the keys",
    "tf.contrib.seq2seq.LuongAttention": "attention written out in a loop over an RNN cell: scores tf.matmul(query, "
                                         "W keys, transpose_b=True), tf.nn.softmax, the weighted sum of the keys",
    "tf.contrib.seq2seq.AttentionWrapper": "attention written out in a loop over an RNN cell (static unrolling or "
                                           "tf.while_loop)",
    "tf.nn.raw_rnn": "tf.nn.dynamic_rnn over the target embeddings (teacher forcing) to train, and a tf.while_loop "
                     "over the cell writing a tf.TensorArray (its element_shape given) to decode greedily",
    **dict.fromkeys(("tf.feature_column.categorical_column_with_vocabulary_list",
                     "tf.feature_column.categorical_column_with_vocabulary_file",
                     "tf.feature_column.categorical_column_with_hash_bucket"),
                    "tf.feature_column.categorical_column_with_identity over ids mapped from the strings in NumPy "
                    "before feeding"),
    "tf.train.SummaryWriter": "tf.summary.FileWriter",
    "tf.merge_all_summaries": "tf.summary.merge_all",
    "tf.merge_summary": "tf.summary.merge",
    "tf.scalar_summary": "tf.summary.scalar",
    "tf.histogram_summary": "tf.summary.histogram",
    "tf.image_summary": "tf.summary.image",
    "tf.initialize_variables": "tf.variables_initializer",
    "tf.py_function": "computing the value in NumPy and feeding it through a tf.placeholder",
    "tf.image.decode_jpeg": "decoding the images in Python (e.g. PIL) and feeding them, or PNG files and "
                            "tf.image.decode_png",
    "tf.nn.conv3d_transpose": "tf.nn.conv2d_transpose over frames folded into the batch",
    "tf.image.ssim_multiscale": "tf.image.ssim (one scale)",
    "tf.nn.fractional_max_pool": "tf.nn.max_pool",
    "tf.train.AdagradDAOptimizer": "tf.train.AdagradOptimizer",
    "tf.train.SyncReplicasOptimizer": None,
    "tf.train.Server": None,
    "tf.train.ClusterSpec": None,
    "tf.train.QueueRunner": "a tf.data pipeline (tf.data.TFRecordDataset, TextLineDataset, FixedLengthRecordDataset)",
    # A session's steps take turns (one at a time per device), so a dequeue waiting inside a step for another
    # thread's enqueue would wait forever: queues of one's own are refused.
    **dict.fromkeys(("tf.FIFOQueue", "tf.PaddingFIFOQueue", "tf.RandomShuffleQueue", "tf.PriorityQueue",
                     "tf.QueueBase", "tf.queue.FIFOQueue", "tf.queue.PaddingFIFOQueue",
                     "tf.queue.RandomShuffleQueue", "tf.train.add_queue_runner"),
                    "tf.data.Dataset.from_generator over the Python producer (or from_tensor_slices of the arrays), "
                    "or tf.train.slice_input_producer with tf.train.batch / shuffle_batch"),
    "tf.saved_model.save": "tf.saved_model.simple_save or tf.saved_model.builder.SavedModelBuilder (TF1's form)",
    "tf.saved_model.load_v2": "tf.saved_model.loader.load(sess, tags, export_dir) (TF1's form)",
    "tf.lite": None,
    "tf.tpu": None,
    "tf.distribute": None,
    "tf.function": "graph mode (tfplus is graph mode only)",
    "tf.enable_eager_execution": "graph mode (tfplus is graph mode only)",
    "tf.executing_eagerly": "graph mode (tfplus is graph mode only; the answer is always False)",
    "tf.GradientTape": "tf.gradients",
    "tf.complex64": "float32 tensors (tfplus has no complex dtypes)",
    "tf.complex128": "float64 tensors (tfplus has no complex dtypes)",
    "tf.fft": None,
}


def unsupported_error(full_name: str) -> UnsupportedError:
    """The error for the TF1 name `full_name` (e.g. 'tf.nn.lrn')."""
    alternative = ALTERNATIVES.get(full_name)
    msg = f"tfplus does not implement {full_name} (a TF1 API)"
    if alternative:
        msg += f"; the nearest supported alternative: {alternative}"
    msg += ". README.md's compatibility table lists what tfplus supports."
    return UnsupportedError(msg)


def module_getattr(module_name: str, public_name: str):
    """A module-level `__getattr__` for module `module_name`, shown to users as `public_name` (e.g. 'tf.nn')."""
    def __getattr__(name: str):
        # Python's own probes (__path__, __wrapped__, _ipython_...) and private names stay AttributeErrors.
        if name.startswith("_"):
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        raise unsupported_error(f"{public_name}.{name}")
    __getattr__.__module__ = module_name
    return __getattr__


def namespace(public_name: str, **members):
    """A small TF1 namespace object (like tf.keras) whose missing names raise UnsupportedError."""
    class _Namespace:
        def __init__(self):
            self.__dict__.update(members)

        def __getattr__(self, name):
            if name.startswith("_"):
                raise AttributeError(name)
            raise unsupported_error(f"{public_name}.{name}")

        def __repr__(self):
            return f"<tfplus namespace {public_name}>"
    return _Namespace()



def resolve(root, full_name: str) -> bool:
    """True where `root` (the tfplus module) implements the TF1 name `full_name` (e.g. 'tf.nn.relu'), False where
    it refuses it with UnsupportedError. A plain AttributeError (a name neither implemented nor refused)
    propagates."""
    obj = root
    try:
        for part in full_name.split(".")[1:]:
            obj = getattr(obj, part)
    except UnsupportedError:
        return False
    return True
