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
