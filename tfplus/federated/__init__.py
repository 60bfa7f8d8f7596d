"""Federated training of tfplus models: the framework's part here, Flower's in tfplus.federated.flower.

    from tfplus.federated import FederatedModel, partition      # no Flower needed
    from tfplus.federated import flower                         # pip install "tfplus[federated]"
    flower.simulate(flower.Federation(model="lenet", clients=8, rounds=5, out="fl"))

`tfplus federated simulate --help` runs it from the command line; README.md's "Federated training" section says
how to run it on one machine and on several.
"""
from tfplus.federated.partition import partition

__all__ = ["FederatedModel", "partition", "STRATEGIES"]

# Flower's strategies that `tfplus federated simulate --strategy` offers (tfplus.federated.flower.make_strategy).
STRATEGIES = ("fedavg", "fedprox", "fedadam", "fedavgm", "fedadagrad", "fedyogi")


def __getattr__(name: str):
    # FederatedModel imports the trainer (~50 ms): on first use, not whenever the CLI builds its parser.
    if name == "FederatedModel":
        from tfplus.federated.model import FederatedModel
        return FederatedModel
    raise AttributeError(f"module 'tfplus.federated' has no attribute {name!r}")
