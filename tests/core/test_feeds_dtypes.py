"""dtype conversion as tf.as_dtype does it, and feeds converted as TF1's Session converts them (NumPy's
asarray to the placeholder's dtype), except that values the dtype cannot hold are errors: TensorFlow is the
oracle for everything else."""
import numpy as np
import pytest

import tfplus as tf

# Strings and types TensorFlow's as_dtype refuses; tfplus refuses them too.
REFUSED = ["int", "f4", "i", "Float32", "float_", "long", "", int, complex, str]


def test_every_dtype_string_converts_as_tensorflow_does(tf1):
    from tensorflow.python.framework import dtypes as tf_dtypes
    names = sorted(tf_dtypes._STRING_TO_TF)
    assert {"float", "double", "half", "float32_ref"} <= set(names)
    supported = 0
    for name in names:
        theirs = tf1.as_dtype(name).base_dtype.name
        if theirs in {d.name for d in tf.dtypes.ALL} | {"string"}:  # string: the checkpoint ops' names
            assert tf.as_dtype(name).name == theirs, name
            supported += 1
        else:
            with pytest.raises(TypeError, match=rf"dtype '{name}' is not supported by tfplus; supported: "):
                tf.as_dtype(name)
    assert supported == 2 * 13  # 9 names + float, double, half + string; each also as *_ref
    for value in REFUSED:
        with pytest.raises(TypeError):
            tf1.as_dtype(value)
        with pytest.raises(TypeError, match="cannot convert"):
            tf.as_dtype(value)
    for value in [float, bool, np.float32, np.int16, np.dtype(">f4"), np.dtype("uint8"), np.zeros(2, np.int8),
                  1, 2, 3, 9, 19]:
        assert tf.as_dtype(value).name == tf1.as_dtype(value).name, value


def test_placeholder_dtype_strings_and_int_shape(tf1):
    for name in ["float", "double", "half", "int32", "bool"]:
        with tf.Graph().as_default():
            ours = tf.placeholder(name, shape=3)
        with tf1.Graph().as_default():
            theirs = tf1.placeholder(name, shape=3)
        assert (ours.dtype.name, ours.shape.as_list()) == (theirs.dtype.name, theirs.shape.as_list())


# (placeholder dtype, fed value) pairs that TF1 converts; tfplus must give the same array.
CONVERTED = [
    ("int32", np.array([1.7, -2.9, 2147483647.9])),
    ("int32", [1.5, 2]), ("int32", ["3"]), ("int32", np.array([True, False])), ("int32", np.int64([5, -7])),
    ("uint8", [3.5, 255]), ("int64", np.uint32([4000000000])), ("int16", np.float32([-32768.5])),
    ("float32", np.array([1e-300, 1.5, np.inf, -np.inf])), ("float32", [2**70]), ("float32", ["1.5"]),
    ("float32", np.int64([2**62])), ("float16", np.array([65504.0, 1e-9])), ("bool", [0, 2, 0.5]),
    ("float64", np.float32([0.1])), ("int32", np.zeros((0, 2))),
]


@pytest.mark.parametrize("dtype,value", CONVERTED, ids=[f"{d}-{i}" for i, (d, _) in enumerate(CONVERTED)])
def test_feeds_convert_as_tf1(tf1, dtype, value):
    shape = [None] * np.ndim(value)
    with tf1.Graph().as_default():
        p = tf1.placeholder(dtype, shape)
        with tf1.Session() as sess:
            theirs = sess.run(p, {p: value})
    with tf.Graph().as_default():
        p = tf.placeholder(dtype, shape)
        with tf.Session() as sess:
            ours = sess.run(p, {p: value})
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    assert ours.tobytes() == theirs.tobytes(), (ours, theirs)


# Values TF1 wraps, saturates or turns into infinity silently: errors in tfplus.
REFUSED_FEEDS = [
    ("int32", np.int64([2**33 + 3]), "8589934595 to Tensor 'p:0' of dtype int32: out of its range"),
    ("int32", [2**40], "out of its range"), ("uint8", [-1], "-1 .*out of its range \\[0, 255\\]"),
    ("uint8", [300], "300 .*out of its range"), ("int32", np.array([np.nan]), "NaN or infinity"),
    ("int64", [np.inf], "NaN or infinity"), ("int32", np.array([3e9]), "3000000000.0 .*out of its range"),
    ("int64", np.array([9.3e18]), "out of its range"), ("int64", np.uint64([2**63]), "out of its range"),
    ("int64", [2**64], "Python int too large"), ("float32", np.array([1e300]), "1e\\+300 .*out of its range"),
    ("float16", [70000], "70000 .*out of its range"), ("float32", [1 + 2j], "imaginary part"),
]


@pytest.mark.parametrize("dtype,value,message", REFUSED_FEEDS,
                         ids=[f"{d}-{i}" for i, (d, _, _) in enumerate(REFUSED_FEEDS)])
def test_feeds_out_of_range_are_errors(dtype, value, message):
    with tf.Graph().as_default():
        p = tf.placeholder(dtype, [None], name="p")
        with tf.Session() as sess, pytest.raises((ValueError, TypeError), match=message):
            sess.run(p, {p: value})


def test_dtype_mismatch_names_the_op_and_the_likely_cause():
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float64, [None, 2], name="x")
        w = tf.Variable(tf.zeros([2, 3]), name="w")
        with pytest.raises(TypeError, match=r"MatMul 'logits': .*float64, float32.*likely cause: 'x:0' is "
                                            r"float64 because placeholder 'x' was declared float64.*'w/read:0' "
                                            r"is float32 because variable 'w' was created float32.*tf.cast"):
            tf.matmul(x, w, name="logits")
        c = tf.constant(np.ones((2, 3)), name="c")
        with pytest.raises(TypeError, match=r"AddV2 'bias': .*'c:0' is float64 because it is a constant "
                                            r"made from a float64 value \(NumPy arrays keep their dtype"):
            tf.add(w, c, name="bias")
