"""The TF1 scripts of tests/zoo2.py (BERT, GPT-2, GCN, PINN, MAML, speech with CTC, tf.distributions, PPO,
factorization machines, NCF, detection and segmentation) run with `import tfplus as tf` as with TensorFlow's
tf.compat.v1: the same losses, weights and outputs, with the same initial values and random numbers; and the API
pieces they brought in, checked against TensorFlow beyond the scripts' cases."""
import numpy as np
import pytest
from tutorials import check_against_tensorflow
from zoo2 import SCRIPTS, run_script

import tfplus

_COMPARED = sorted(SCRIPTS)


@pytest.mark.parametrize("name", _COMPARED)
def test_zoo2_script_runs_as_in_tensorflow(tf1, name):
    check_against_tensorflow(tf1, run_script, name)


def _lookup(mod, sizes, strategy, ids, max_norm=None):
    with mod.Graph().as_default():
        parts = [mod.constant(np.arange(n * 3, dtype=np.float32).reshape(n, 3) + 10 * i) for i, n in enumerate(sizes)]
        with mod.Session() as sess:
            return sess.run(mod.nn.embedding_lookup(parts, mod.constant(ids), partition_strategy=strategy,
                                                    max_norm=max_norm))


@pytest.mark.parametrize("sizes", [(3, 3, 2), (2, 2, 2), (3, 2)])
@pytest.mark.parametrize("strategy", ["mod", "div"])
def test_partitioned_embedding_lookup_as_tensorflow(tf1, sizes, strategy):
    """Every row of a table split in partitions of uneven sizes (as tf.fixed_size_partitioner splits one), by
    both strategies, and max_norm's clipping."""
    ids = np.arange(sum(sizes), dtype=np.int32)[::-1].reshape(-1, 2 if sum(sizes) % 2 == 0 else 1)
    np.testing.assert_allclose(_lookup(tfplus, sizes, strategy, ids), _lookup(tf1, sizes, strategy, ids))
    np.testing.assert_allclose(_lookup(tfplus, sizes, strategy, ids, 5.0), _lookup(tf1, sizes, strategy, ids, 5.0),
                               rtol=1e-6)
