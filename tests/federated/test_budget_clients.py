"""A federated client under a memory budget loads the global weights within it: MobileNet's 13 MB of weights and
13 MB of momentum slots leave 6 MB of a 32 MB budget, where one run of the fed vector planned 4 x 13 MB. Under a
budget set_weights feeds a few variables a run straight into their assigns (tfplus.federated.model._stages)."""
import numpy as np
import pytest

from tfplus import trainer
from tfplus.federated import FederatedModel
from tfplus.federated.model import _stages
from tfplus.planner import BudgetError

BUDGET = 32_000_000


def _counted(m):
    runs, run = [], m.sess.run
    m.sess.run = lambda *a, **k: runs.append(a) or run(*a, **k)
    return runs


def test_mobilenet_weights_load_within_a_32mb_budget_in_a_few_runs_and_round_trip_exactly():
    m = FederatedModel(trainer.TrainConfig(model="mobilenet", batch_size=4, synthetic=True, memory_budget="32MB"),
                       steps_per_round=1, rounds=1, cpus=1)
    rng = np.random.default_rng(0)
    sent = {k: rng.standard_normal(v.shape).astype(np.float32) for k, v in m.get_weights().items()}
    largest = max(v.nbytes for v in sent.values())
    runs = _counted(m)
    m.set_weights(list(sent.values()))  # Flower's list, in the order of m.names
    got = m.get_weights()
    assert all(np.array_equal(got[k], sent[k]) for k in sent)
    assert len(runs) == len(m._stages) + 1 <= 8, len(runs)  # the stages, then get_weights' one run
    plans = m.sess.memory_plans
    assert plans and all(p.peak_bytes <= BUDGET for p in plans), [p.peak_bytes for p in plans]
    model_bytes = sum(v.nbytes for v in sent.values())
    assert max(p.peak_bytes - p.fixed_bytes for p in plans) <= largest * 1.01 < model_bytes / 3
    with pytest.raises(ValueError, match="missing"):
        m.set_weights({k: v for k, v in sent.items() if k != m.names[0]})
    # the regression: the unstaged load (the fed vector, split into the variables) is refused at 32 MB
    with pytest.raises(BudgetError, match=r"federated/set_weights needs at least (4\d|5\d)\.\d MB"):
        m.sess.run(m._assign, {m._flat: np.zeros(sum(m._sizes), np.float32)})
    m.close()


def test_fedprox_anchors_load_with_the_weights_under_a_budget():
    m = FederatedModel(trainer.TrainConfig(model="lenet", batch_size=8, synthetic=True, memory_budget="8MB"),
                       steps_per_round=1, rounds=1, cpus=1, proximal=True)
    rng = np.random.default_rng(1)
    sent = {k: rng.standard_normal(v.shape).astype(np.float32) for k, v in m.get_weights().items()}
    m.set_weights(sent)
    anchors = m.sess.run([v for v in m.tg.graph.get_collection("local_variables")  # in the order of the weights
                          if v is not m.sums.var])  # the other local variable: the steps' running sums
    assert len(anchors) == len(sent) and all(np.array_equal(a, sent[k]) for a, k in zip(anchors, m.names))
    m.close()


@pytest.mark.parametrize("sizes, want", [([4, 1, 1, 2, 4, 1], [[0], [1, 2, 3], [4], [5]]), ([3], [[0]]),
                                         ([1, 1, 1], [[0], [1], [2]])])
def test_stages_group_consecutive_variables_up_to_the_largest(sizes, want):
    assert _stages(sizes) == want
