"""A LeNet-5-style CNN: conv5x5 VALID 6, pool, conv5x5 VALID 16, pool, FC 400-120-84-10 (ReLU, max-pool).

Small and quick (about 62k parameters at the default widths): a second model for the CLI and the fast model of
the tests.

    logits = lenet(tf.placeholder(tf.float32, [None, 3, 32, 32]))
"""
from __future__ import annotations

from typing import Sequence

import tfplus as tf
from tfplus.graphs.mentee import _check_data_format, conv_relu, dense, flatten, max_pool_2x2


def lenet(images: tf.Tensor, conv_widths: Sequence[int] = (6, 16), fc_widths: Sequence[int] = (120, 84),
          num_classes: int = 10, data_format: str = "NCHW") -> tf.Tensor:
    """LeNet logits (N, num_classes): each 5x5 VALID conv (scopes conv1, conv2, ...) is followed by a 2x2
    max-pool; then the hidden FC layers (fc1, fc2, ...) and the logits layer."""
    _check_data_format(data_format)
    x = images
    for i, width in enumerate(conv_widths):
        x = conv_relu(x, f"conv{i + 1}", width, ksize=5, padding="VALID", data_format=data_format)
        x = max_pool_2x2(x, data_format)
    x = flatten(x)
    for i, width in enumerate(fc_widths):
        x = dense(x, f"fc{i + 1}", width)
    return dense(x, f"fc{len(fc_widths) + 1}", num_classes, relu=False)
