"""Random ops: one generator (Philox4x32-10) on every device, so a seed gives the same numbers on cpu and
opencl (float32 bit for bit; float64 normals within a few ulps of each device's log and cos); TF1's seeding
(each run draws anew, a new session starts over, unseeded ops differ between sessions); distributions."""
import numpy as np
import pytest
from conftest import needs_opencl

import tfplus as tf
from tfplus.graphs.mentee import mentee, training_graph
from tfplus.kernels.numpy import random as np_random

OPS = {"uniform": tf.random_uniform, "normal": tf.random_normal, "truncated": tf.truncated_normal}


def _draws(device, dtype, runs=2, seed=5, shape=(3, 700)):
    g = tf.Graph()
    with g.as_default():
        if seed is not None:
            tf.set_random_seed(seed)
        ops = {name: fn(shape, dtype=dtype) for name, fn in OPS.items()}
    with tf.Session(graph=g, device=device) as sess:
        return [sess.run(ops) for _ in range(runs)]


def _ulps(a, b):
    bits = f"i{a.itemsize}"
    return np.abs(a.view(bits).astype(np.int64) - b.view(bits).astype(np.int64))


@needs_opencl
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_same_seed_same_numbers_on_cpu_and_opencl(dtype):
    cpu, cl = _draws("cpu", dtype), _draws("opencl", dtype)
    for run_cpu, run_cl in zip(cpu, cl):
        for name in OPS:
            a, b = run_cpu[name], run_cl[name]
            assert a.dtype == b.dtype == dtype.np and a.shape == b.shape
            if dtype is tf.float32 or name == "uniform":  # normals: computed in double, then rounded
                assert a.tobytes() == b.tobytes(), (name, int(_ulps(a, b).max()))
            else:
                assert _ulps(a, b).max() <= 4, name
    assert cpu[0]["normal"].tobytes() != cpu[1]["normal"].tobytes()  # each run draws new numbers


@needs_opencl
def test_seeded_model_starts_from_the_same_weights_and_loss_on_every_device():
    rng = np.random.default_rng(0)
    images = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
    labels = np.int32([0, 1, 2, 3])
    results = []
    for device in ("cpu", "opencl"):
        tg = training_graph(mentee, total_steps=10, seed=3, image_shape=(3, 8, 8),
                            model_kwargs={"conv_widths": (4, 4, 4, 8, 8), "fc_widths": (8,)})
        weights = tg.graph.get_collection(tf.GraphKeys.GLOBAL_VARIABLES)
        with tf.Session(graph=tg.graph, device=device) as sess:
            sess.run(tg.init_op)
            values = sess.run(weights)
            results.append((values, sess.run(tg.cross_entropy, {tg.images: images, tg.labels: labels})))
    (w_cpu, loss_cpu), (w_cl, loss_cl) = results
    assert len(w_cpu) > 4 and all(a.tobytes() == b.tobytes() for a, b in zip(w_cpu, w_cl))
    assert abs(loss_cpu - loss_cl) < 1e-5 * abs(loss_cpu)


def test_tf1_seeding_new_session_repeats_and_unseeded_ops_differ(device):
    first, again = _draws(device, tf.float32, runs=1), _draws(device, tf.float32, runs=1)
    assert all(first[0][k].tobytes() == again[0][k].tobytes() for k in OPS)
    other = _draws(device, tf.float32, runs=1, seed=6)
    assert all(first[0][k].tobytes() != other[0][k].tobytes() for k in OPS)
    a, b = _draws(device, tf.float32, runs=1, seed=None), _draws(device, tf.float32, runs=1, seed=None)
    assert all(a[0][k].tobytes() != b[0][k].tobytes() for k in OPS)


@pytest.mark.parametrize("dtype", [tf.float16, tf.float32, tf.float64])
def test_distributions(dtype):
    (draw,) = _draws("cpu", dtype, runs=1, shape=(200, 200))
    n = 40000
    u, z, t = (draw[k].astype(np.float64).ravel() for k in ("uniform", "normal", "truncated"))
    assert 0.0 <= u.min() and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 4 * np.sqrt(1 / 12 / n) and abs(u.var() - 1 / 12) < 0.003
    assert np.histogram(u, bins=10, range=(0, 1))[0].min() > 0.09 * n
    assert abs(z.mean()) < 4 / np.sqrt(n) and abs(z.std() - 1) < 0.015
    assert abs((np.abs(z) < 1).mean() - 0.6827) < 0.01 and abs((np.abs(z) > 2).mean() - 0.0455) < 0.005
    # Truncated at 2 standard deviations: N(0, 1) conditioned on |z| <= 2 has variance 0.7737.
    assert np.abs(t).max() <= 2.0 and abs(t.mean()) < 4 / np.sqrt(n) and abs(t.var() - 0.7737) < 0.015


def test_philox_matches_the_published_known_answers():
    # Random123's kat_vectors for philox4x32_10: (counter, key) -> output.
    cases = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
             ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
             ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
              (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]
    for (c0, c1, c2, c3), key, want in cases:
        got = np_random.philox(np.array([c0]), c1, c2 | (c3 << 32), key)
        assert [int(w[0]) for w in got] == list(want)
