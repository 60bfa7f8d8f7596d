"""A TF1 dropout script against TensorFlow, run by tfplus on opencl with its step replayed (issue 34, stop 45):
what tfplus promises of tf.nn.dropout (ops/nn_ops.py), not TensorFlow's own numbers (the generators differ):
kept values scaled by 1 / keep_prob, the rest zeros, about keep_prob of them kept; new numbers every run; the same
sequence again in a new session of a seeded graph; noise_shape keeping whole rows; keep_prob fed as 1.0 (the
usual evaluation switch) returning x."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import needs_opencl

import tfplus as tf

pytestmark = needs_opencl

ROWS, COLS = 200, 40
RUNS = 6  # a planned step is recorded twice, then replayed


def _script(lib, device=None, noise_shape=None):
    """The runs of a TF1 script: dropout of a fed batch with keep_prob fed, `RUNS` training runs (keep 0.7) in
    each of two sessions, then one evaluation run (keep 1.0). Returns the runs and, for tfplus, whether every
    run after the recordings replayed."""
    g = lib.Graph()
    with g.as_default():
        lib.set_random_seed(1)
        x = lib.placeholder(lib.float32, [None, COLS])
        keep = lib.placeholder(lib.float32, [])
        y = lib.nn.dropout(x, keep_prob=keep, noise_shape=noise_shape, seed=7)
    batch = np.full((ROWS, COLS), 3.0, np.float32)
    kwargs = {} if device is None else {"device": device}
    sessions, played = [], []
    for _ in range(2):
        with lib.Session(graph=g, **kwargs) as sess:
            if device is not None:
                play = sess.runtime.tape_play
                sess.runtime.tape_play = lambda *a, play=play: played.append(play(*a)) or played[-1]
            sessions.append([sess.run(y, {x: batch, keep: 0.7}) for _ in range(RUNS)])
            evaluated = sess.run(y, {x: batch, keep: 1.0})
    return sessions, evaluated, played


@pytest.mark.parametrize("noise_shape", [None, [ROWS, 1]], ids=["elementwise", "rows"])
def test_dropout_script_behaves_as_tensorflows(tf1, noise_shape):
    mine, theirs = _script(tf, "opencl", noise_shape), _script(tf1, None, noise_shape)
    assert mine[2] and all(mine[2]), "tfplus replays the runs once recorded"
    for (sessions, evaluated, _), who in ((mine, "tfplus"), (theirs, "tensorflow")):
        first, second = sessions
        for y in first:
            kept = y != 0
            np.testing.assert_allclose(y[kept], 3.0 / 0.7, rtol=1e-6, err_msg=who)
            # the kept fraction of n draws: 0.7 within 5 standard deviations
            n = ROWS if noise_shape else ROWS * COLS
            assert abs(kept.mean() - 0.7) < 5 * np.sqrt(0.21 / n), (who, kept.mean())
            if noise_shape:
                assert (kept.all(axis=1) | ~kept.any(axis=1)).all(), f"{who}: whole rows kept or dropped"
        assert len({y.tobytes() for y in first}) == RUNS, f"{who}: each run draws anew"
        for a, b in zip(first, second):
            np.testing.assert_array_equal(a, b, err_msg=f"{who}: a new session draws the seeded sequence again")
        np.testing.assert_array_equal(evaluated, 3.0, err_msg=f"{who}: keep_prob 1.0 keeps x")
