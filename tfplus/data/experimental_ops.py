"""tf.data.experimental's transformations that TF1 input pipelines pass to Dataset.apply.

    ds = tf.data.TFRecordDataset(files).apply(tf.data.experimental.map_and_batch(parse, 32))
"""
from __future__ import annotations

__all__ = ["parallel_interleave", "map_and_batch", "shuffle_and_repeat"]


def parallel_interleave(map_func, cycle_length, block_length=1, sloppy=False, buffer_output_elements=None,
                        prefetch_input_elements=None):
    """`ds.apply(parallel_interleave(tf.data.TFRecordDataset, cycle_length=4))`: Dataset.interleave (in its
    deterministic order, whatever `sloppy` says)."""
    return lambda dataset: dataset.interleave(map_func, cycle_length, block_length)


def map_and_batch(map_func, batch_size, num_parallel_batches=None, drop_remainder=False, num_parallel_calls=None):
    """`ds.apply(map_and_batch(parse, 32))`: Dataset.map, then batch."""
    return lambda dataset: dataset.map(map_func).batch(batch_size, drop_remainder)


def shuffle_and_repeat(buffer_size, count=None, seed=None):
    """`ds.apply(shuffle_and_repeat(1000))`: Dataset.shuffle (a new order each pass), then repeat."""
    return lambda dataset: dataset.shuffle(buffer_size, seed).repeat(count)
