"""tf.einsum and tf.linalg against TensorFlow (the `tf1` oracle): values and input gradients of equations TF1
accepts (batch dims, ellipses with broadcasting, traces, diagonals, outer products, implicit outputs, three
operands), run on every device; TF's node names for the linalg ops; and errors for bad shapes that name the op.
The ops' forward and finite-difference checks are op-table cases (tests/cases_linalg.py)."""
import numpy as np
import pytest
from tforacle import rand, run_built, same_as_tensorflow

import tfplus as tf

EINSUM = [
    ("ij,jk->ik", [(3, 4), (4, 2)]), ("bqd,bkd->bqk", [(2, 3, 4), (2, 5, 4)]), ("ii->", [(3, 3)]),
    ("ii->i", [(3, 3)]), ("bii->bi", [(2, 3, 3)]), ("i,j->ij", [(3,), (4,)]), ("ij,jk", [(3, 4), (4, 2)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]), ("ab...,b->a...", [(2, 3, 4, 5), (3,)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]), ("iij,jk->ik", [(3, 3, 4), (4, 2)]), ("ijk->kj", [(2, 3, 4)]),
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]), ("i,i->", [(3,), (3,)]), ("ij->", [(2, 3)]),
]


@pytest.mark.parametrize("equation,shapes", EINSUM, ids=[e for e, _ in EINSUM])
def test_einsum_matches_tensorflow(tf1, device, equation, shapes):
    arrays = [rand(*s, seed=k) for k, s in enumerate(shapes)]
    same_as_tensorflow(tf1, device, lambda m, *xs: m.einsum(equation, *xs), arrays, tol=1e-4)


def test_einsum_with_unknown_dims_matches_numpy():
    q, k = rand(2, 3, 4), rand(2, 5, 4, seed=1)
    g = tf.Graph()
    with g.as_default():
        pq, pk = tf.placeholder(tf.float32, [None, None, 4]), tf.placeholder(tf.float32, [None, None, 4])
        out = tf.einsum("bqd,bkd->bqk", pq, pk)
        assert out.shape.as_list() == [None, None, None]
        with tf.Session() as s:
            np.testing.assert_allclose(s.run(out, {pq: q, pk: k}), np.einsum("bqd,bkd->bqk", q, k), rtol=1e-5)


@pytest.mark.parametrize("equation,shapes,message", [
    ("ij,jk->ik", [(3, 4)], "names 2 operands"), ("ijk->i", [(3, 4)], "do not fit"),
    ("ij->ii", [(3, 3)], "repeated"), ("ij->k", [(3, 3)], "in no operand"), ("i.j->i", [(3, 3)], "'...' only")])
def test_einsum_errors_name_the_equation(equation, shapes, message):
    with tf.Graph().as_default():
        xs = [tf.placeholder(tf.float32, s) for s in shapes]
        with pytest.raises(ValueError, match=message):
            tf.einsum(equation, *xs)


def test_linalg_node_names_are_tensorflows():
    """tf.linalg builds the nodes TF1 builds, under the same default names."""
    with tf.Graph().as_default():
        a, b = tf.placeholder(tf.float32, [3, 3]), tf.placeholder(tf.float32, [3, 2])
        names = {"inv": tf.linalg.inv(a), "matrix_inverse": tf.matrix_inverse(a), "det": tf.linalg.det(a),
                 "slogdet": tf.linalg.slogdet(a)[1], "cholesky": tf.cholesky(a), "solve": tf.linalg.solve(a, b),
                 "tri": tf.linalg.triangular_solve(a, b), "qr": tf.linalg.qr(a)[1], "svd": tf.svd(a)[0],
                 "eigh": tf.linalg.eigh(a)[0], "eigvalsh": tf.linalg.eigvalsh(a), "trace": tf.linalg.trace(a),
                 "cholesky_solve": tf.linalg.cholesky_solve(a, b)}
        assert {k: t.name for k, t in names.items()} == {
            "inv": "MatrixInverse:0", "matrix_inverse": "MatrixInverse_1:0", "det": "MatrixDeterminant:0",
            "slogdet": "LogMatrixDeterminant:1", "cholesky": "Cholesky:0", "solve": "MatrixSolve:0",
            "tri": "triangular_solve/MatrixTriangularSolve:0", "qr": "Qr:1", "svd": "Svd:0",
            "eigh": "SelfAdjointEigV2:0", "eigvalsh": "SelfAdjointEigV2_1:0", "trace": "Trace:0",
            "cholesky_solve": "cholesky_solve/MatrixTriangularSolve_1:0"}


@pytest.mark.parametrize("build,message", [
    (lambda: tf.linalg.inv(tf.zeros([2, 3])), "MatrixInverse: input must be square"),
    (lambda: tf.linalg.det(tf.zeros([3])), "MatrixDeterminant: input must be a .*rank >= 2"),
    (lambda: tf.linalg.solve(tf.zeros([3, 3]), tf.zeros([2, 1])), "MatrixSolve: .* same number of rows"),
    (lambda: tf.cholesky(tf.zeros([3, 3], tf.int32)), "Cholesky: input has dtype int32"),
    (lambda: tf.linalg.cross(tf.zeros([2]), tf.zeros([2])), "cross: the last axis"),
    (lambda: tf.tensordot(tf.zeros([2, 3]), tf.zeros([2, 3]), 1), "tensordot: axes .* have different sizes"),
])
def test_bad_shapes_name_the_op(build, message):
    with tf.Graph().as_default(), pytest.raises((ValueError, TypeError), match=message):
        build()


def test_singular_matrix_raises_naming_the_node():
    with tf.Graph().as_default():
        a = tf.placeholder(tf.float64, [2, 2])
        inv = tf.linalg.inv(a, name="my_inverse")
        with tf.Session() as s, pytest.raises(tf.errors.InvalidArgumentError, match="my_inverse.*not invertible"):
            s.run(inv, {a: np.ones((2, 2))})


def test_top_level_aliases_and_namespace_match_tensorflow(tf1, device):
    a = (rand(2, 3, 3) + 3 * np.eye(3)).astype(np.float32)
    for build in (lambda m, x: m.matrix_determinant(x), lambda m, x: m.linalg.adjoint(x),
                  lambda m, x: m.linalg.band_part(x, 0, -1), lambda m, x: m.linalg.eye(3, batch_shape=[2]) + x,
                  lambda m, x: m.linalg.norm(x, axis=[-2, -1]), lambda m, x: m.linalg.tensordot(x, x, [[2], [1]]),
                  lambda m, x: m.linalg.l2_normalize(x, -1), lambda m, x: m.linalg.matrix_transpose(x),
                  lambda m, x: m.linalg.diag(m.linalg.diag_part(x)), lambda m, x: m.linalg.matmul(x, x)):
        same_as_tensorflow(tf1, device, build, [a], tol=1e-4)


def test_self_adjoint_eig_reads_the_lower_triangle_as_tensorflow(tf1):
    a = rand(3, 3)  # not symmetric: both read its lower triangle
    got = run_built(tf, lambda m, x: m.linalg.eigvalsh(x), [a], grads=True)
    want = run_built(tf1, lambda m, x: m.linalg.eigvalsh(x), [a], grads=True)
    for x, y in zip(got, want):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)


def test_pinv_rank_normalize_and_tensor_diag_part_match_tensorflow(tf1, device):
    x = np.random.default_rng(0).standard_normal((2, 4, 3))
    for build in (lambda m, a: m.linalg.pinv(a), lambda m, a: m.linalg.normalize(a, axis=-1)[0],
                  lambda m, a: m.linalg.tensor_diag_part(a[0, :2, :2])):
        same_as_tensorflow(tf1, device, build, [x], tol=1e-6)
    low_rank = x[..., :1] * np.ones(3)  # rank 1
    same_as_tensorflow(tf1, device, lambda m, a: m.linalg.matrix_rank(a), [low_rank], grads=False)
