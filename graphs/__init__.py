"""tfplus.graphs: model builders and the registry the CLI picks them from (`tfplus train --model NAME`).

    from tfplus.graphs import MODELS, get_model
    get_model("alexnet").image_shape    # (3, 227, 227); CIFAR's models take (3, 32, 32)
    logits = get_model("mentee").build(images, conv_widths=(16, 16, 32, 32, 64))

Installed only as a subpackage of tfplus (a PyPI package named `graphs` exists).
"""
if __name__ == "graphs":
    raise ImportError("import this package as tfplus.graphs, not as top-level 'graphs' "
                      "(pip install . maps it there)")

from functools import partial as _partial  # noqa: E402
from typing import Callable, NamedTuple  # noqa: E402

from tfplus.graphs import alexnet, lenet, mentee  # noqa: E402  the modules; tfplus.graphs.mentee stays the module
from tfplus.graphs import mobilenet as _mobilenet  # noqa: E402
from tfplus.graphs import seqnet as _seqnet  # noqa: E402
from tfplus.graphs.mentee import TrainGraph, training_graph  # noqa: E402


class Model(NamedTuple):
    """A registered model: `build(images, conv_widths=..., fc_widths=..., data_format=...) -> logits`, for
    images of `image_shape` (channels, height, width)."""
    name: str
    build: Callable
    description: str
    image_shape: tuple[int, int, int] = (3, 32, 32)


MODELS: dict[str, Model] = {m.name: m for m in (
    Model("mentee", mentee.mentee,
          "5 conv (3x3 32 32 | 64 64 | 128 |) + 3 FC (2048-256-128-10); 698k params"),
    Model("lenet", lenet.lenet, "2 conv (5x5 6 | 16 |) + 3 FC (400-120-84-10); 62k params"),
    Model("mobilenet", _mobilenet.mobilenet, "MobileNet v1 for 32x32: conv 32 + 13 depthwise separable blocks "
          "(BN, ReLU6; --widths: the stem's and each block's width) + global pool + FC; 3.2M params"),
    # ImageNet-size builders for fine-tuning users' own images (plan them; CIFAR's 32x32 images do not fit them).
    Model("alexnet", alexnet.alexnet, "AlexNet (2012, one tower) for 227x227: conv 11x11/4 96 + LRN + pool, conv 5x5 "
          "256 + LRN + pool, conv 384 384 256 + pool, FC 4096-4096 with dropout; 58.3M params", (3, 227, 227)),
    Model("mobilenet224", _partial(_mobilenet.mobilenet224, num_classes=10), "MobileNet v1 for 224x224 (Keras's: "
          "stride-2 stem; loads its weights, graphs/mobilenet.py); 3.2M params", (3, 224, 224)),
    # Sequence models on row-sequential CIFAR-10 (32 steps of 96 features); --widths: conv, RNN 1, RNN 2.
    Model("seqnet", _seqnet.seqnet, "Conv1D 64 + BN + ReLU, GRU 128, BN, GRU 128, time-distributed dense, mean "
          "over time; rows as time steps; 193k params"),
    Model("seqnet-lstm", _partial(_seqnet.seqnet, cell="lstm"), "seqnet with LSTM cells"),
    Model("seqnet-bi", _partial(_seqnet.seqnet, bidirectional=True), "seqnet with bidirectional GRUs"),
    Model("seqnet-bilstm", _partial(_seqnet.seqnet, cell="lstm", bidirectional=True),
          "seqnet with bidirectional LSTMs"),
)}


def get_model(name: str) -> Model:
    """The registered model `name`; a ValueError listing the known ones otherwise."""
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; choose one of: {', '.join(sorted(MODELS))}") from None


__all__ = ["MODELS", "Model", "TrainGraph", "get_model", "training_graph"]
