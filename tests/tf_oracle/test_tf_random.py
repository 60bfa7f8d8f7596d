"""tf.random and TF1's top-level random ops against TensorFlow (the `tf1` oracle): the same distributions (a
two-sample Kolmogorov-Smirnov test of our samples against TF's, both from fixed seeds, so the verdict is the same
every run), shapes, dtypes and default node names; and TF1's seed semantics (graph seed + op seed: the same seeds
give the same sequence in every session, each run draws new numbers, stateless ops are functions of their seed),
on every device."""
import numpy as np
import pytest
from scipy import stats

import tfplus as tf

N = 4000


def _samples(mod, build, runs=1, device=None):
    g = mod.Graph()
    with g.as_default():
        mod.set_random_seed(7)
        out = build(mod)
        kwargs = {"graph": g, "device": device} if mod is tf else {"graph": g}
        with mod.Session(**kwargs) as s:
            return out, [s.run(out) for _ in range(runs)]


DISTRIBUTIONS = {
    "normal": lambda m: m.random.normal([N], 1.0, 2.0),
    "random_normal_float64": lambda m: m.random_normal([N], dtype=m.float64),
    "truncated_normal": lambda m: m.truncated_normal([N], -1.0, 0.5),
    "uniform": lambda m: m.random.uniform([N], -2.0, 3.0),
    "uniform_int32": lambda m: m.random.uniform([N], 3, 11, dtype=m.int32),
    "uniform_int64": lambda m: m.random_uniform([N], -5, 5, dtype=m.int64),
    "gamma": lambda m: m.random.gamma([N], 2.5),
    "gamma_small_alpha_with_beta": lambda m: m.random_gamma([N // 2], [0.5, 4.0], beta=[2.0, 0.5]),
    "poisson": lambda m: m.random.poisson([0.5, 6.0], [N // 2]),
    "poisson_int32": lambda m: m.random_poisson(3.0, [N], dtype=m.int32),
    "multinomial": lambda m: m.multinomial(m.log([[0.2, 0.5, 0.3]]), N),
    "categorical": lambda m: m.random.categorical(m.log([[0.1, 0.9]]), N, dtype=m.int32),
    "shuffle": lambda m: m.random_shuffle(m.range(8))[0],
    "stateless_normal": lambda m: m.random.stateless_normal([N], [3, 4], stddev=2.0),
    "stateless_uniform": lambda m: m.random.stateless_uniform([N], [3, 4], minval=1.0, maxval=2.0),
    "stateless_truncated_normal": lambda m: m.random.stateless_truncated_normal([N], [3, 4]),
    "stateless_categorical": lambda m: m.random.stateless_categorical(m.log([[0.3, 0.7]]), N, [5, 6]),
}


@pytest.mark.parametrize("name", list(DISTRIBUTIONS))
def test_distributions_shapes_and_dtypes_match_tensorflow(tf1, device, name):
    build = DISTRIBUTIONS[name]
    runs = 300 if name == "shuffle" else 1  # one permutation per run: first elements of many runs
    ours, got = _samples(tf, build, runs, device)
    theirs, want = _samples(tf1, build, runs)
    assert ours.shape.as_list() == theirs.shape.as_list(), name
    assert got[0].dtype == want[0].dtype, name
    got, want = np.ravel(got).astype(np.float64), np.ravel(want).astype(np.float64)
    if np.issubdtype(np.asarray(want).dtype, np.floating) and not np.all(want == np.round(want)):
        assert stats.ks_2samp(got, want).pvalue > 1e-3, name
    else:  # discrete: each value's frequency within 5 standard errors of TF's
        for v in np.union1d(got, want):
            p, q = np.mean(got == v), np.mean(want == v)
            assert abs(p - q) <= 5 * np.sqrt(max(q * (1 - q), 1 / len(want)) / len(want)) + 1e-3, (name, v)


def test_default_node_names_are_tensorflows():
    with tf.Graph().as_default():
        names = [tf.random.uniform([2], 0, 5, dtype=tf.int32).name, tf.random_poisson(1.0, [2]).name,
                 tf.random_gamma([2], 1.0).op.name.split("/")[0], tf.random.normal([2]).name]
    assert names == ["random_uniform:0", "random_poisson:0", "random_gamma", "random_normal:0"]


def test_seeds_repeat_across_sessions_and_runs_draw_anew(device):
    """TF1: with a graph seed (and op seeds derived from it or given), a new session repeats the sequence; each
    run of a session draws new numbers; without any seed, sessions differ."""
    def sequences(graph_seed, op_seed):
        g = tf.Graph()
        with g.as_default():
            if graph_seed is not None:
                tf.set_random_seed(graph_seed)
            outs = [tf.random.uniform([3], seed=op_seed), tf.random.uniform([3], 0, 100, dtype=tf.int64, seed=op_seed),
                    tf.random.gamma([3], 2.0, seed=op_seed), tf.random.poisson(4.0, [3], seed=op_seed)]
        runs = []
        for _ in range(2):
            with tf.Session(graph=g, device=device) as s:
                runs.append([s.run(outs), s.run(outs)])
        return runs
    for graph_seed, op_seed in ((1, None), (None, 5), (1, 5)):
        (a1, a2), (b1, b2) = sequences(graph_seed, op_seed)
        for x, y in zip(a1 + a2, b1 + b2):
            np.testing.assert_array_equal(x, y)
        assert not all(np.array_equal(x, y) for x, y in zip(a1, a2))
    (a1, _), (b1, _) = sequences(None, None)
    assert not all(np.array_equal(x, y) for x, y in zip(a1, b1))


def test_stateless_ops_are_functions_of_their_seed(device):
    with tf.Graph().as_default():
        seed = tf.placeholder(tf.int32, [2])
        x = tf.random.stateless_normal([5], seed)
        with tf.Session(device=device) as s:
            a, b, c = (s.run(x, {seed: v}) for v in ([1, 2], [1, 2], [2, 1]))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_get_seed_follows_tf1(tf1):
    for mod in (tf, tf1):
        with mod.Graph().as_default():
            assert mod.random.get_seed(None) == (None, None)
            assert mod.get_seed(3)[1] == 3
            mod.set_random_seed(11)
            assert mod.random.get_seed(4) == (11, 4)


def test_random_errors_name_the_argument():
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match="needs maxval"):
            tf.random.uniform([2], 0, None, dtype=tf.int32)
        with pytest.raises(ValueError, match="need minval < maxval"):
            tf.random.uniform([2], 5, 5, dtype=tf.int32)
        with pytest.raises(ValueError, match="seed of shape"):
            tf.random.stateless_normal([2], [1, 2, 3])
        with pytest.raises(NotImplementedError, match="RandomGamma .*alpha"):
            alpha = tf.placeholder(tf.float32, [])
            tf.gradients(tf.random.gamma([3], alpha), alpha)
