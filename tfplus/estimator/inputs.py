"""tf.estimator.inputs.numpy_input_fn: an input_fn over NumPy arrays (a dict of features, and labels), in
batches, for num_epochs passes (None: for ever), shuffled or in order.

    input_fn = tf.estimator.inputs.numpy_input_fn({"x": train_x}, train_y, batch_size=32, num_epochs=None,
                                                  shuffle=True)
    est.train(input_fn, steps=1000)
"""
from __future__ import annotations

import numpy as np

from tfplus.unsupported import module_getattr


def numpy_input_fn(x, y=None, batch_size: int = 128, num_epochs: int | None = 1, shuffle=None,
                   queue_capacity: int = 1000, num_threads: int = 1):
    """An input_fn returning (features, labels) batches of `x` (an array, or a dict of arrays with as many
    rows each) and `y` (an array, a dict of arrays, or None: features only). The last batch of an epoch may be
    smaller; `queue_capacity` is the shuffle buffer."""
    from tfplus.data.dataset_ops import Dataset, make_one_shot_iterator
    if not isinstance(shuffle, bool):
        raise ValueError(f"shuffle must be provided and explicitly set as boolean (it is recommended to set it as "
                         f"True for training); got {shuffle}")
    if not isinstance(x, dict):
        x_dict = {"__direct_np_input_key__": x}
    else:
        if not x:
            raise ValueError("x cannot be an empty dict")
        x_dict = dict(x)
    if isinstance(y, dict) and set(y) & set(x_dict):
        raise ValueError(f"{sorted(set(y) & set(x_dict))} duplicate keys are found in both x and y; rename them")
    arrays = {k: np.asarray(v) for k, v in x_dict.items()}
    labels = None if y is None else {k: np.asarray(v) for k, v in y.items()} if isinstance(y, dict) else np.asarray(y)
    lengths = {k: len(v) for k, v in arrays.items()}
    lengths.update({f"y[{k!r}]": len(v) for k, v in (labels.items() if isinstance(labels, dict) else ())})
    if labels is not None and not isinstance(labels, dict):
        lengths["y"] = len(labels)
    if len(set(lengths.values())) != 1:
        raise ValueError(f"numpy_input_fn: the arrays have different lengths {lengths}; x and y need one row per "
                         "example in each")

    def input_fn():
        data = Dataset.from_tensor_slices(arrays if labels is None else (arrays, labels))
        if shuffle:
            data = data.shuffle(queue_capacity)
        data = data.repeat(num_epochs).batch(batch_size)
        element = make_one_shot_iterator(data).get_next()
        features, target = (element, None) if labels is None else element
        if not isinstance(x, dict):
            features = features["__direct_np_input_key__"]
        return features if target is None else (features, target)
    return input_fn


def pandas_input_fn(*args, **kwargs):
    raise NotImplementedError("tf.estimator.inputs.pandas_input_fn: tfplus does not implement it; pass the "
                              "DataFrame's columns as NumPy arrays to tf.estimator.inputs.numpy_input_fn "
                              "({name: df[name].values}, df[label].values, ...)")


__all__ = ["numpy_input_fn", "pandas_input_fn"]
__getattr__ = module_getattr(__name__, "tf.estimator.inputs")
