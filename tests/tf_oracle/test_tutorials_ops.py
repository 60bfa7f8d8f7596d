"""The APIs the tutorial scripts (tests/tutorials.py) needed, one by one against TensorFlow (the `tf1` oracle) on
every device, and their gradients against finite differences in float64: dilated convolutions (conv2d
dilations, atrous_conv2d, convolution, depthwise/conv1d rates), gather_nd, the orthogonal initializer, the
candidate samplers (by their distribution) and the sampled losses' sparse gradients."""
import functools

import numpy as np
import pytest
from tforacle import rand as _rand
from tforacle import same_as_tensorflow

import tfplus as tf

_same = functools.partial(same_as_tensorflow, tol=1e-4)  # tfplus and TF sum these ops in different orders


@pytest.mark.parametrize("rate,padding", [(2, "SAME"), (2, "VALID"), (3, "SAME")])
def test_atrous_conv2d_and_conv2d_dilations_match_tensorflow(tf1, device, rate, padding):
    x, f = _rand(2, 9, 8, 3), _rand(3, 2, 3, 4, seed=1)
    _same(tf1, device, lambda m, x, f: m.nn.atrous_conv2d(x, f, rate, padding), [x, f])
    # NOTE: TensorFlow's CPU has no Conv2DBackpropFilter with dilations: its gradients come from atrous_conv2d.
    _same(tf1, device, lambda m, x, f: m.nn.conv2d(x, f, [1, 1, 1, 1], padding, dilations=[1, rate, rate, 1]),
          [x, f], tf_build=lambda m, x, f: m.nn.atrous_conv2d(x, f, rate, padding))


def test_uneven_and_strided_dilations_match_tensorflow(tf1, device):
    x, f = _rand(2, 11, 10, 2), _rand(3, 3, 2, 3, seed=1)
    for pad in ("SAME", "VALID"):
        _same(tf1, device, lambda m, x, f, pad=pad: m.nn.conv2d(x, f, [1, 1, 1, 1], pad, dilations=[1, 3, 2, 1]),
              [x, f], grads=False)
        _same(tf1, device, lambda m, x, f, pad=pad: m.nn.convolution(x, f, pad, dilation_rate=[2, 3]), [x, f],
              grads=False)
    _same(tf1, device, lambda m, x, f: m.nn.conv1d(x[:, 0], f[0], 1, "SAME", dilations=2), [x, f], grads=False)


def test_depthwise_and_separable_rates_match_tensorflow(tf1, device):
    x, dw, pw = _rand(2, 9, 9, 3), _rand(3, 3, 3, 2, seed=1), _rand(1, 1, 6, 4, seed=2)
    _same(tf1, device, lambda m, x, f: m.nn.depthwise_conv2d(x, f, [1, 1, 1, 1], "SAME", rate=[2, 2]), [x, dw])
    _same(tf1, device, lambda m, x, f, p: m.nn.separable_conv2d(x, f, p, [1, 1, 1, 1], "VALID", rate=[2, 2]),
          [x, dw, pw])


@pytest.mark.parametrize("dilations,strides,padding", [((2, 3), (1, 1), "SAME"), ((2, 2), (2, 2), "VALID"),
                                                      ((3, 1), (1, 2), "SAME")])
def test_dilated_conv_gradients_match_finite_differences(dilations, strides, padding):
    rng = np.random.default_rng(3)
    x, f = rng.standard_normal((1, 7, 6, 2)), rng.standard_normal((2, 3, 2, 2))
    g = tf.Graph()
    with g.as_default():
        xp, fp = tf.placeholder(tf.float64, x.shape), tf.placeholder(tf.float64, f.shape)
        y = tf.nn.conv2d(xp, fp, [1, *strides, 1], padding, dilations=[1, *dilations, 1])
        loss = tf.reduce_sum(y * tf.constant(rng.standard_normal(y.shape.as_list())))
        grads = tf.gradients(loss, [xp, fp])
        with tf.Session(graph=g) as s:
            analytic = s.run(grads, {xp: x, fp: f})
            for k, (ph, value) in enumerate(((xp, x), (fp, f))):
                numeric = np.zeros_like(value)
                for i in np.ndindex(value.shape):
                    plus, minus = value.copy(), value.copy()
                    plus[i] += 1e-6
                    minus[i] -= 1e-6
                    feeds = {xp: x, fp: f}
                    numeric[i] = (s.run(loss, {**feeds, ph: plus}) - s.run(loss, {**feeds, ph: minus})) / 2e-6
                np.testing.assert_allclose(analytic[k], numeric, rtol=1e-6, atol=1e-6, err_msg=f"input {k}")


@pytest.mark.parametrize("indices", [[[1, 2], [3, 0], [1, 2]], [[2], [0]], [[[0, 1, 1]], [[3, 2, 0]]]])
def test_gather_nd_matches_tensorflow(tf1, device, indices):
    params = _rand(4, 3, 2)
    idx = np.array(indices, np.int32)
    _same(tf1, device, lambda m, p: m.gather_nd(p, idx), [params])


@pytest.mark.parametrize("shape,gain", [((3, 3, 4, 4), 0.5), ((4, 9), 1.0), ((6, 6), 2.0)])
def test_orthogonal_initializer_matches_tensorflow(tf1, shape, gain):
    values = []
    for mod in (tf, tf1):
        with mod.Graph().as_default():
            w = mod.orthogonal_initializer(gain=gain)(shape)
            draw = [op for op in mod.get_default_graph().get_operations() if op.type == "RandomStandardNormal"]
            normal = _rand(*draw[0].outputs[0].shape.as_list(), seed=4)
            with mod.Session() as s:
                values.append(s.run(w, {draw[0].outputs[0]: normal}))
    np.testing.assert_allclose(values[0], values[1], rtol=1e-4, atol=1e-5)
    flat = values[0].reshape(-1, shape[-1])
    small = flat.T @ flat if flat.shape[0] >= flat.shape[1] else flat @ flat.T
    np.testing.assert_allclose(small, gain ** 2 * np.eye(len(small)), atol=1e-5)


def _draws(mod, sampler, unique, n=1000):
    """`n` samples of `sampler` (4 of 12 classes, a fixed seed) and the expected counts of the classes 0..11."""
    with mod.Graph().as_default():
        true = mod.constant(np.arange(12, dtype=np.int64).reshape(12, 1))
        sampled, true_count, sampled_count = getattr(mod.nn, sampler)(true, 1, 4, unique, 12, seed=7)
        with mod.Session() as s:
            draws = [s.run([sampled, sampled_count]) for _ in range(n)]
            return np.array([d[0] for d in draws]), s.run(true_count)[:, 0], draws


@pytest.mark.parametrize("sampler", ["log_uniform_candidate_sampler", "uniform_candidate_sampler"])
@pytest.mark.parametrize("unique", [True, False])
def test_candidate_samplers_follow_tensorflows_distribution(tf1, sampler, unique):
    ids, counts, draws = _draws(tf, sampler, unique)
    want_ids, want_counts, want_draws = _draws(tf1, sampler, unique)
    assert ids.dtype == np.int64 and ids.shape == (1000, 4) and ids.min() >= 0 and ids.max() < 12
    if unique:
        assert all(len(set(row)) == 4 for row in ids)
    # How often each class is drawn (per sample of 4): within 0.07 of TensorFlow's (over 3 standard errors).
    freq = np.array([(ids == k).sum(1).mean() for k in range(12)])
    want_freq = np.array([(want_ids == k).sum(1).mean() for k in range(12)])
    np.testing.assert_allclose(freq, want_freq, atol=0.07)
    # The expected counts vary with each draw's number of tries (unique): their means over the draws agree.
    def mean_counts(draws):
        return np.array([np.mean([c[list(i).index(k)] for i, c in draws if k in i]) for k in range(12)])
    np.testing.assert_allclose(mean_counts(draws), mean_counts(want_draws), rtol=0.05)
    if not unique:
        np.testing.assert_allclose(counts, want_counts, rtol=1e-5)


@pytest.mark.parametrize("loss_fn", ["nce_loss", "sampled_softmax_loss"])
def test_sampled_losses_train_only_the_sampled_rows(loss_fn):
    rng = np.random.default_rng(5)
    weights = tf.Variable(rng.standard_normal((50, 4)).astype(np.float32))
    biases = tf.Variable(np.zeros(50, np.float32))
    labels = tf.constant([[3], [9], [3]], tf.int64)
    inputs = tf.constant(rng.standard_normal((3, 4)).astype(np.float32))
    sampled = tf.nn.log_uniform_candidate_sampler(labels, 1, 6, True, 50)
    loss = tf.reduce_sum(getattr(tf.nn, loss_fn)(weights, biases, labels, inputs, 6, 50, sampled_values=sampled))
    grad_w, grad_b = (tf.convert_to_tensor(g) for g in tf.gradients(loss, [weights, biases]))
    with tf.Session() as s:
        s.run(tf.global_variables_initializer())
        for _ in range(3):
            value, gw, gb, ids = s.run([loss, grad_w, grad_b, sampled[0]])
            assert np.isfinite(value)
            rows = set(ids.tolist()) | {3, 9}
            assert set(np.flatnonzero(np.abs(gw).sum(1))) <= rows and set(np.flatnonzero(gb)) <= rows
            # Each sampled row that is not a true class is pushed by the loss.
            assert all(gb[k] != 0 for k in ids if k not in (3, 9))


# TF1's composite functions (tfplus.ops.composite_ops): name -> (build(module, *inputs), inputs); the values and the
# gradients of each against TensorFlow's.
_M = _rand(3, 4, seed=11)
_COMPOSITES = {
    "norm": (lambda m, x: m.norm(x), [_M]),
    "norm_axis_keepdims": (lambda m, x: m.norm(x, axis=1, keepdims=True), [_M]),
    "norm_1": (lambda m, x: m.norm(x, ord=1, axis=0), [_M]),
    "norm_inf": (lambda m, x: m.norm(x, ord=np.inf, axis=-1), [_M]),
    "norm_fro_matrix": (lambda m, x: m.norm(x, ord="fro", axis=[1, 2]), [_rand(2, 3, 4, seed=12)]),
    "norm_p3": (lambda m, x: m.norm(x, ord=3, axis=1), [_M]),
    "tensordot_1": (lambda m, a, b: m.tensordot(a, b, 1), [_rand(2, 3, 4), _rand(4, 5, seed=1)]),
    "tensordot_axes": (lambda m, a, b: m.tensordot(a, b, [[0, 2], [2, 0]]), [_rand(2, 3, 4), _rand(4, 5, 2, seed=1)]),
    "einsum_matmul": (lambda m, a, b: m.einsum("ij,jk->ik", a, b), [_rand(3, 4), _rand(4, 2, seed=1)]),
    "einsum_attention": (lambda m, q, k: m.einsum("bqd,bkd->bqk", q, k), [_rand(2, 3, 4), _rand(2, 5, 4, seed=1)]),
    "einsum_transpose_sum": (lambda m, a: m.einsum("ijk->kj", a), [_rand(2, 3, 4)]),
    "einsum_implicit_outer": (lambda m, a, b: m.einsum("i,j", a, b), [_rand(3), _rand(4, seed=1)]),
    "reverse": (lambda m, x: m.reverse(x, [0, 2]), [_rand(2, 3, 4)]),
    "reverse_v2": (lambda m, x: m.reverse_v2(x, [-1]), [_M]),
    "boolean_mask": (lambda m, x: m.boolean_mask(x, x[:, 0] > 0), [_M]),
    "boolean_mask_2d": (lambda m, x: m.boolean_mask(x, x > 0), [_M]),
    "scatter_nd": (lambda m, u: m.scatter_nd([[1, 0], [2, 3], [1, 0]], u, [3, 4, 2]), [_rand(3, 2)]),
    "eye": (lambda m, x: x * m.eye(3, 4), [_M[:, :4]]),
    "eye_batch": (lambda m, x: x + m.eye(2, batch_shape=[3]), [_rand(3, 2, 2)]),
    "linspace": (lambda m, x: x * m.linspace(0.0, 1.0, 4), [_M]),
    "lin_space": (lambda m, x: x * m.lin_space(-2.0, 3.0, 4), [_M]),
    "band_lower": (lambda m, x: m.matrix_band_part(x, -1, 0), [_rand(2, 4, 4)]),
    "band_1_2": (lambda m, x: m.matrix_band_part(x, 1, 2), [_M]),
    "matrix_diag": (lambda m, x: m.matrix_diag(x), [_M]),
    "diag": (lambda m, x: m.diag(x), [_rand(4)]),
    "meshgrid_xy": (lambda m, a, b: m.stack(m.meshgrid(a, b), 0), [_rand(3), _rand(4, seed=1)]),
    "meshgrid_ij": (lambda m, a, b: m.stack(m.meshgrid(a, b, indexing="ij"), 0), [_rand(3), _rand(4, seed=1)]),
    "sort": (lambda m, x: m.sort(x), [_M]),
    "sort_descending": (lambda m, x: m.sort(x, direction="DESCENDING"), [_M]),
    "argsort": (lambda m, x: m.cast(m.argsort(x), m.float32) * x, [_M]),
    "segment_sum": (lambda m, x: m.segment_sum(x, [0, 0, 2]), [_M]),
    "segment_mean": (lambda m, x: m.segment_mean(x, [0, 1, 1]), [_M]),
    "max_pool2d": (lambda m, x: m.nn.max_pool2d(x, 2, 2, "SAME"), [_rand(2, 5, 5, 3, seed=14)]),
    "avg_pool2d": (lambda m, x: m.nn.avg_pool2d(x, [1, 3, 3, 1], [1, 2, 2, 1], "VALID"), [_rand(2, 5, 5, 3, seed=14)]),
    "hinge_loss": (lambda m, x: m.losses.hinge_loss((_rand(3, 4, seed=15) > 0).astype(np.float32), x), [_M]),
    "cosine_distance": (lambda m, x, y: m.losses.cosine_distance(m.nn.l2_normalize(y, 1), m.nn.l2_normalize(x, 1),
                                                                 axis=1), [_M, _rand(3, 4, seed=15)]),
    "weighted_xent": (lambda m, x, y: m.nn.weighted_cross_entropy_with_logits(m.sigmoid(y), x, 2.5),
                      [_M, _rand(3, 4, seed=15)]),
    "crelu": (lambda m, x: m.nn.crelu(x), [_M]),
    "log_poisson_full": (lambda m, x: m.nn.log_poisson_loss(m.constant([[0.0, 1.0, 2.0, 5.0]] * 3), x,
                                                            compute_full_loss=True), [_M]),
    "sufficient_statistics_moments": (lambda m, x: m.stack(m.nn.normalize_moments(
        *m.nn.sufficient_statistics(x, [0], shift=0.5)), 0), [_M]),
    "erf": (lambda m, x: m.erf(x) + m.math.erf(2.0 * x), [_M]),
    "arg_max": (lambda m, x: m.cast(m.arg_max(x, 1), m.float32) + x[:, 0], [_M]),
    "arg_min": (lambda m, x: m.cast(m.arg_min(x, 0), m.float32) + x[0], [_M]),
    "reverse_sequence": (lambda m, x: m.reverse_sequence(x, [2, 4, 1], seq_axis=1, batch_axis=0), [_M]),
    "reverse_sequence_time_major": (lambda m, x: m.reverse_sequence(x, [1, 3], seq_axis=1, batch_axis=2),
                                    [_rand(3, 4, 2, seed=13)]),
    "matmul_batched": (lambda m, a, b: m.matmul(a, b), [_rand(2, 3, 4), _rand(2, 4, 5, seed=1)]),
    "matmul_batched_transposed": (lambda m, a, b: m.matmul(a, b, transpose_a=True, transpose_b=True),
                                  [_rand(2, 2, 4, 3), _rand(2, 2, 5, 4, seed=1)]),
    "matmul_broadcast": (lambda m, a, b: m.matmul(a, b), [_rand(2, 3, 4), _rand(4, 5, seed=1)]),
}


@pytest.mark.parametrize("name", sorted(_COMPOSITES))
def test_composites_match_tensorflow(tf1, device, name):
    build, arrays = _COMPOSITES[name]
    _same(tf1, device, build, arrays)


def test_random_shuffle_is_a_uniform_permutation():
    with tf.Graph().as_default():
        tf.set_random_seed(1)  # repeatable draws
        shuffled = tf.random_shuffle(tf.constant(np.arange(4 * 2).reshape(4, 2)))
        also = tf.random.shuffle(tf.range(4), seed=3)
        with tf.Session() as s:
            draws = [s.run([shuffled, also]) for _ in range(600)]
    for rows, ids in draws[:5]:
        assert sorted(rows[:, 0].tolist()) == [0, 2, 4, 6] and (rows[:, 1] == rows[:, 0] + 1).all()
        assert sorted(ids.tolist()) == [0, 1, 2, 3]
    # Each row lands in each place a quarter of the time (600 draws: within 0.08, over 4 standard errors).
    where = np.array([[np.mean([r[p, 0] == 2 * k for r, _ in draws]) for p in range(4)] for k in range(4)])
    np.testing.assert_allclose(where, 0.25, atol=0.08)


def test_piecewise_constant_decay_matches_tensorflow(tf1):
    values = []
    for mod in (tf, tf1):
        with mod.Graph().as_default():
            step = mod.placeholder(mod.int64, [])
            lr = mod.train.piecewise_constant_decay(step, [3, 6], [0.1, 0.05, 0.01])
            with mod.Session() as s:
                values.append([s.run(lr, {step: k}) for k in range(9)])
    np.testing.assert_allclose(values[0], values[1])


def test_dilated_conv_nchw_is_nhwc_transposed(device):
    x, f = _rand(2, 9, 8, 3), _rand(3, 2, 3, 4, seed=1)
    with tf.Graph().as_default() as g:
        nhwc = tf.nn.conv2d(x, f, 1, "SAME", dilations=[1, 2, 3, 1])
        nchw = tf.nn.conv2d(x.transpose(0, 3, 1, 2), f, 1, "SAME", data_format="NCHW", dilations=[1, 1, 2, 3])
        layer = tf.layers.conv2d(x.transpose(0, 3, 1, 2), 4, 3, padding="same", data_format="channels_first",
                                 dilation_rate=(2, 3), kernel_initializer=tf.constant_initializer(0.5))
        layer_nhwc = tf.layers.conv2d(x, 4, 3, padding="same", dilation_rate=(2, 3),
                                      kernel_initializer=tf.constant_initializer(0.5))
        with tf.Session(graph=g, device=device) as s:
            s.run(tf.global_variables_initializer())
            a, b, c, d = s.run([nhwc, nchw, layer, layer_nhwc])
    np.testing.assert_allclose(b.transpose(0, 2, 3, 1), a, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(c.transpose(0, 2, 3, 1), d, rtol=1e-5, atol=1e-5)
