"""tf.keras for TF1 graph-mode scripts: layers on tensors, Sequential and functional models, compile / fit /
evaluate / predict, Keras's losses, metrics, optimizers, initializers, regularizers, callbacks and backend,
checked against TensorFlow's Keras (tf_keras) in graph mode by tests/tf_oracle/test_keras*.py.

    import tfplus as tf
    model = tf.keras.Sequential([tf.keras.layers.Dense(64, activation="relu", input_shape=(784,)),
                                 tf.keras.layers.Dense(10, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x, y, epochs=2, batch_size=32, verbose=0)

What tfplus lacks raises UnsupportedError (subclassed models, HDF5 files, masking, RNN dropout, datasets in fit).
"""
from tfplus.keras import (
    activations,
    backend,
    callbacks,
    initializers,
    layers,
    losses,
    metrics,
    optimizers,
    regularizers,
)
from tfplus.keras.engine import Input, Model, Sequential
from tfplus.unsupported import module_getattr as _module_getattr
from tfplus.unsupported import namespace as _namespace


def _to_categorical(y, num_classes=None, dtype="float32"):
    """One-hot rows of integer labels (tf.keras.utils.to_categorical)."""
    import numpy as np
    y = np.asarray(y, dtype=int).ravel()
    n = int(num_classes or y.max() + 1)
    return np.eye(n, dtype=dtype)[y]


models = _namespace("tf.keras.models", Model=Model, Sequential=Sequential)
utils = _namespace("tf.keras.utils", to_categorical=_to_categorical)
__all__ = ["Input", "Model", "Sequential", "activations", "backend", "callbacks", "initializers", "layers", "losses",
           "metrics", "models", "optimizers", "regularizers", "utils"]

__getattr__ = _module_getattr(__name__, "tf.keras")
