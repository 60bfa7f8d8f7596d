"""Input pipelines: CIFAR-10 readers, download, augmentation and prefetched batches (numpy only)."""
from tfplus.data.cifar10 import (
    CLASSES,
    MEAN,
    STD,
    DataError,
    Dataset,
    Prefetch,
    TrainBatches,
    cache_dir,
    crop_flip,
    data_root,
    download,
    eval_batches,
    find_data_dir,
    load,
    no_crops,
    normalize,
    random_crop_flip,
    random_crops,
    read_batches,
    synthetic,
    train_batches,
    write_binary_batches,
)

__all__ = [
    "CLASSES", "MEAN", "STD", "DataError", "Dataset", "Prefetch", "TrainBatches", "cache_dir", "crop_flip",
    "data_root", "download", "eval_batches", "find_data_dir", "load", "no_crops", "normalize", "random_crop_flip",
    "random_crops", "read_batches", "synthetic", "train_batches", "write_binary_batches",
]

# `tf.data` is this module once anything imported it (Python binds a loaded submodule to its package): TF1's other
# tf.data names then raise UnsupportedError, as they do before.
from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr(__name__, "tf.data")
