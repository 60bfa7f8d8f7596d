"""Input pipelines: TF1's tf.data (Dataset and its iterators: tfplus.data.dataset_ops), and CIFAR-10 readers,
download, augmentation and prefetched batches (numpy only; the in-memory CIFAR-10 set is CifarDataset)."""
from tfplus.data.cifar10 import (
    CLASSES,
    MEAN,
    STD,
    DataError,
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
from tfplus.data.cifar10 import Dataset as CifarDataset
from tfplus.data.dataset_ops import (
    AUTOTUNE,
    Dataset,
    Iterator,
    get_output_classes,
    get_output_shapes,
    get_output_types,
    make_initializable_iterator,
    make_one_shot_iterator,
)
from tfplus.data.readers import FixedLengthRecordDataset, TextLineDataset, TFRecordDataset

__all__ = [
    "CLASSES", "MEAN", "STD", "CifarDataset", "DataError", "Dataset", "Iterator", "Prefetch", "TrainBatches",
    "cache_dir", "crop_flip",
    "data_root", "download", "eval_batches", "find_data_dir", "load", "no_crops", "normalize", "random_crop_flip",
    "random_crops", "read_batches", "synthetic", "train_batches", "write_binary_batches",
    "get_output_classes", "get_output_shapes", "get_output_types", "make_initializable_iterator",
    "make_one_shot_iterator", "FixedLengthRecordDataset", "TFRecordDataset", "TextLineDataset",
]

from tfplus.data import experimental_ops as _experimental  # noqa: E402
from tfplus.data import window_ops as _window  # noqa: E402
from tfplus.unsupported import namespace as _namespace  # noqa: E402

experimental = _namespace("tf.data.experimental", AUTOTUNE=AUTOTUNE,
                          **{n: getattr(m, n) for m in (_experimental, _window) for n in m.__all__})

# TF1's tf.data names tfplus lacks raise UnsupportedError.
from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr(__name__, "tf.data")
