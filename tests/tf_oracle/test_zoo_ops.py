"""The APIs the model-zoo scripts (tests/zoo.py) needed, one by one against TensorFlow (the `tf1` oracle) on every
device, with their gradients against finite differences in float64: tf.image's resizing, tf.pad's REFLECT and
SYMMETRIC modes, depth_to_space / space_to_depth, softmax over any axis, matrix tf.norm, rank-3
tf.nn.convolution, non-max suppression (forward only) and get_variable with an int shape."""
import numpy as np
import pytest
from tforacle import rand as _rand
from tforacle import same_as_tensorflow as _same

import tfplus as tf


def _check_gradient(build, x):
    """tfplus's gradient of a random projection of build(x) against central differences, in float64."""
    rng = np.random.default_rng(5)
    g = tf.Graph()
    with g.as_default():
        xp = tf.placeholder(tf.float64, x.shape)
        y = build(xp)
        loss = tf.reduce_sum(y * tf.constant(rng.standard_normal(y.shape.as_list())))
        (grad,) = tf.gradients(loss, [xp])
        with tf.Session(graph=g) as s:
            analytic = s.run(tf.convert_to_tensor(grad), {xp: x})
            numeric = np.zeros_like(x)
            for i in np.ndindex(x.shape):
                plus, minus = x.copy(), x.copy()
                plus[i] += 1e-6
                minus[i] -= 1e-6
                numeric[i] = (s.run(loss, {xp: plus}) - s.run(loss, {xp: minus})) / 2e-6
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-6)


RESIZES = [((3, 4), (7, 5), False), ((5, 7), (3, 4), False), ((3, 4), (7, 5), True), ((4, 4), (1, 3), True),
           ((2, 3), (6, 9), False)]


@pytest.mark.parametrize("in_hw,out_hw,align", RESIZES)
def test_resize_bilinear_and_nearest_match_tensorflow(tf1, device, in_hw, out_hw, align):
    x = _rand(2, *in_hw, 3)
    _same(tf1, device, lambda m, x: m.image.resize_bilinear(x, out_hw, align_corners=align), [x])
    _same(tf1, device, lambda m, x: m.image.resize_nearest_neighbor(x, out_hw, align_corners=align), [x])
    _same(tf1, device, lambda m, x: m.image.resize_images(x[0], out_hw, m.image.ResizeMethod.NEAREST_NEIGHBOR,
                                                          align_corners=align), [x])


def test_resize_to_sizes_read_from_shapes_matches_tensorflow(tf1):
    """U-Net's resize to a skip connection's size, tf.shape(skip)[1:3], with the batch dimension unknown."""
    x, skip = _rand(2, 3, 4, 2), _rand(2, 6, 5, 1, seed=1)
    outs = []
    for mod in (tf, tf1):
        with mod.Graph().as_default():
            xp, sp = mod.placeholder(mod.float32, [None, 3, 4, 2]), mod.placeholder(mod.float32, [None, 6, 5, 1])
            shape = mod.shape(sp)
            ys = [mod.image.resize_images(xp, shape[1:3]),
                  mod.image.resize_bilinear(xp, mod.stack([shape[1], 7]), align_corners=True),
                  mod.image.resize_nearest_neighbor(xp, mod.shape(xp)[1:3] * 2)]
            # (TensorFlow's static shape of the last is [None, None, None, 2]; tfplus knows it.)
            assert [y.shape.as_list() for y in ys[:2]] == [[None, 6, 5, 2], [None, 6, 7, 2]]
            with mod.Session() as sess:
                outs.append(sess.run(ys, {xp: x, sp: skip}))
    for got, want in zip(*outs):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_resize_images_of_integer_images_matches_tensorflow(tf1):
    x = np.random.default_rng(1).integers(0, 255, (1, 3, 5, 2)).astype(np.uint8)
    _same(tf1, "cpu", lambda m, x: m.image.resize_images(x, [5, 4]), [x], grads=False)
    _same(tf1, "cpu", lambda m, x: m.image.resize_images(x, [6, 7], method=m.image.ResizeMethod.NEAREST_NEIGHBOR),
          [x], grads=False)


@pytest.mark.parametrize("in_hw,out_hw,align", RESIZES[:3])
def test_resize_gradients_match_finite_differences(in_hw, out_hw, align):
    # NOTE: resize_bilinear gives float32 whatever the input's dtype, as TensorFlow's: its gradient is checked
    # against TensorFlow's ResizeBilinearGrad above; nearest keeps float64.
    x = np.random.default_rng(2).standard_normal((1, *in_hw, 2))
    _check_gradient(lambda t: tf.image.resize_nearest_neighbor(t, out_hw, align_corners=align), x)


def test_resize_refuses_what_it_lacks():
    x = tf.placeholder(tf.float32, [1, 4, 4, 1])
    with pytest.raises(NotImplementedError, match="BILINEAR or ResizeMethod.NEAREST_NEIGHBOR"):
        tf.image.resize_images(x, [8, 8], method=tf.image.ResizeMethod.BICUBIC)
    with pytest.raises(ValueError, match="known when the graph is built"):
        tf.image.resize_bilinear(x, tf.placeholder(tf.int32, [2]))


@pytest.mark.parametrize("mode", ["REFLECT", "SYMMETRIC", "reflect"])
def test_mirror_pad_matches_tensorflow(tf1, device, mode):
    x = _rand(2, 4, 5, 3)
    _same(tf1, device, lambda m, x: m.pad(x, [[0, 0], [2, 1], [0, 3], [0, 0]], mode=mode), [x])
    _check_gradient(lambda t: tf.pad(t, [[1, 2], [2, 0]], mode=mode), np.random.default_rng(3).standard_normal((4, 3)))


def test_mirror_pad_too_wide_is_an_error_naming_the_axis():
    with pytest.raises(ValueError, match="axis 1 of size 3 cannot be padded by"):
        tf.pad(tf.zeros([2, 3]), [[0, 0], [3, 0]], mode="REFLECT")


@pytest.mark.parametrize("block", [2, 3])
def test_depth_to_space_and_space_to_depth_match_tensorflow(tf1, device, block):
    _same(tf1, device, lambda m, x: m.depth_to_space(x, block), [_rand(2, 2, 3, 2 * block * block)])
    _same(tf1, device, lambda m, x: m.nn.space_to_depth(x, block), [_rand(2, 2 * block, block, 3)])
    _check_gradient(lambda t: tf.depth_to_space(t, block), np.random.default_rng(4).standard_normal(
        (1, 2, 1, block * block)))
    _check_gradient(lambda t: tf.space_to_depth(t, block), np.random.default_rng(4).standard_normal((1, block, block,
                                                                                                    2)))
    with pytest.raises(ValueError, match="not divisible by block_size"):
        tf.depth_to_space(tf.zeros([1, 2, 2, 6]), 2)


@pytest.mark.parametrize("axis", [0, 1, -2])
def test_softmax_and_log_softmax_over_any_axis_match_tensorflow(tf1, device, axis):
    x = _rand(3, 4, 5)
    _same(tf1, device, lambda m, x: m.nn.softmax(x, axis=axis), [x])
    _same(tf1, device, lambda m, x: m.nn.log_softmax(x, axis=axis), [x])


@pytest.mark.parametrize("ord_", [1, np.inf, "fro"])
def test_matrix_norms_match_tensorflow(tf1, device, ord_):
    x = _rand(2, 3, 4)
    _same(tf1, device, lambda m, x: m.norm(x, ord=ord_, axis=[1, 2]), [x])
    _same(tf1, device, lambda m, x: m.norm(x, ord=ord_, axis=[2, 0], keepdims=True), [x])


def test_rank3_convolution_with_dilation_matches_tensorflow(tf1, device):
    x, f = _rand(2, 9, 3), _rand(2, 3, 4, seed=1)
    _same(tf1, device, lambda m, x, f: m.nn.convolution(x, f, "VALID", dilation_rate=[3]), [x, f])
    _same(tf1, device, lambda m, x, f: m.nn.convolution(x, f, "SAME", strides=[2]), [x, f])


@pytest.mark.parametrize("iou,score", [(0.5, float("-inf")), (0.1, 0.3), (0.7, 0.0)])
def test_non_max_suppression_matches_tensorflow(tf1, device, iou, score):
    rng = np.random.default_rng(6)
    corners = rng.uniform(0, 1, (12, 2, 2)).astype(np.float32)
    boxes = np.concatenate([corners[:, 0], corners[:, 0] + 0.4 * corners[:, 1]], 1)
    boxes[3] = boxes[3, [2, 3, 0, 1]]  # corners given in the other order
    boxes[5] = boxes[5, [0, 1, 0, 1]]  # an empty box
    scores = rng.uniform(0, 1, 12).astype(np.float32)
    scores[7] = scores[2]  # a tie: the lower index first
    for size in (3, 20):
        _same(tf1, device, lambda m, b, s, size=size: m.image.non_max_suppression(b, s, size, iou, score),
              [boxes, scores], grads=False)


def test_get_variable_takes_an_int_or_dimension_shape(tf1):
    for mod in (tf, tf1):
        with mod.Graph().as_default():
            x = mod.placeholder(mod.float32, [None, 5])
            v = mod.get_variable("alpha", x.get_shape()[-1], initializer=mod.constant_initializer(0.25))
            w = mod.get_variable("beta", 3)
            assert (v.shape.as_list(), w.shape.as_list()) == ([5], [3])


def test_instance_norm_normalizes_each_channel_of_each_example_in_either_layout():
    # (Against TF1's definition inside a training script: tests/zoo.py's pix2pix.)
    x = _rand(2, 3, 4, 5)
    with tf.Graph().as_default():
        nhwc = tf.contrib.layers.instance_norm(tf.constant(x), epsilon=0.0)
        nchw = tf.contrib.layers.instance_norm(tf.constant(x.transpose(0, 3, 1, 2)), data_format="NCHW",
                                               param_initializers={"gamma": tf.constant_initializer(2.0)})
        assert sorted(v.op.name for v in tf.global_variables()) == [
            "InstanceNorm/beta", "InstanceNorm/gamma", "InstanceNorm_1/beta", "InstanceNorm_1/gamma"]
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            got, got_nchw = sess.run([nhwc, nchw])
    want = (x - x.mean((1, 2), keepdims=True)) / x.std((1, 2), keepdims=True)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got_nchw.transpose(0, 2, 3, 1), 2 * want, rtol=1e-4, atol=1e-4)


def test_total_variation_image_gradients_and_psnr_match_tensorflow(tf1, device):
    x, y = _rand(2, 4, 5, 3), _rand(2, 4, 5, 3, seed=1)
    _same(tf1, device, lambda m, x: m.image.total_variation(x), [x])
    _same(tf1, device, lambda m, x: m.image.total_variation(x[0]), [x])
    _same(tf1, device, lambda m, x: m.stack(m.image.image_gradients(x)), [x])
    _same(tf1, device, lambda m, x, y: m.image.psnr(x, y, max_val=4.0), [x, y])
    u, v = (np.random.default_rng(s).integers(0, 255, (2, 3, 3, 1)).astype(np.uint8) for s in (1, 2))
    _same(tf1, device, lambda m, u, v: m.image.psnr(u, v, max_val=255), [u, v], grads=False)


@pytest.mark.parametrize("rate", [1, 2])
def test_layers_conv1d_causal_padding_matches_tensorflow(tf1, device, rate):
    x, kernel = _rand(2, 7, 3), _rand(3, 3, 4, seed=1)
    _same(tf1, device, lambda m, x: m.layers.conv1d(x, 4, 3, padding="causal", dilation_rate=rate,
                                                    kernel_initializer=m.constant_initializer(kernel)), [x])
