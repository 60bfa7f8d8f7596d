"""tf.image's basics against TensorFlow (the `tf1` oracle), on single images and batches, float and uint8; the
random ones by what they may give."""
import numpy as np
import pytest

import tfplus as tf

_FNS = {
    "standardize": lambda m, x: m.image.per_image_standardization(x),
    "to_float": lambda m, x: m.image.convert_image_dtype(m.image.convert_image_dtype(x, m.uint8), m.float32),
    "flips": lambda m, x: m.image.flip_left_right(x) - 2.0 * m.image.flip_up_down(x),
    "crop": lambda m, x: m.image.crop_to_bounding_box(x, 1, 2, 3, 2),
    "pad": lambda m, x: m.image.pad_to_bounding_box(x, 1, 0, 7, 6),
    "central": lambda m, x: m.image.central_crop(x, 0.5),
    "crop_or_pad": lambda m, x: m.image.resize_image_with_crop_or_pad(x, 3, 8),
    "gray": lambda m, x: m.image.grayscale_to_rgb(m.image.rgb_to_grayscale(x)),
    "gray_uint8": lambda m, x: m.image.rgb_to_grayscale(m.image.convert_image_dtype(x, m.uint8, saturate=True)),
    "brightness": lambda m, x: m.image.adjust_brightness(x, 0.25),
    "contrast": lambda m, x: m.image.adjust_contrast(x, 1.7),
}


@pytest.mark.parametrize("batch", [False, True])
@pytest.mark.parametrize("fn", sorted(_FNS))
def test_image_ops_match_tf(tf1, fn, batch):
    value = np.random.default_rng(0).uniform(0, 1, (2, 5, 6, 3) if batch else (5, 6, 3)).astype(np.float32)
    got = []
    for m in (tf1, tf):
        with m.Graph().as_default():
            x = m.placeholder(m.float32, [None, 5, 6, 3] if batch else [5, 6, 3])
            y = _FNS[fn](m, x)
            with m.Session() as s:
                got.append((y.shape.as_list(), s.run(y, {x: value})))
    assert got[1][0] == got[0][0]
    np.testing.assert_allclose(got[1][1], got[0][1], rtol=1e-5, atol=1e-5)


def test_random_image_ops_give_what_they_may():
    value = np.random.default_rng(0).uniform(0, 1, (64, 4, 5, 3)).astype(np.float32)
    x = tf.constant(value)
    flips = tf.image.random_flip_left_right(x, seed=1)
    crop = tf.random_crop(x[0], [2, 3, 3], seed=2)
    bright = tf.image.random_brightness(x, 0.2, seed=3)
    with tf.Session() as s:
        flipped, cropped, brighter = s.run([flips, crop, bright])
    same = [np.array_equal(f, v) for f, v in zip(flipped, value)]
    mirrored = [np.array_equal(f, v[:, ::-1]) for f, v in zip(flipped, value)]
    assert all(a or b for a, b in zip(same, mirrored)) and 10 < sum(mirrored) < 54  # each image on its own
    assert any(np.array_equal(cropped, value[0, i:i + 2, j:j + 3]) for i in range(3) for j in range(3))
    delta = brighter - value
    assert np.allclose(delta, delta.flat[0], atol=1e-6) and abs(delta.flat[0]) <= 0.2


def test_bicubic_resizing_is_refused():
    # Bilinear and nearest-neighbor resizing are implemented (tests/tf_oracle/test_zoo_ops.py).
    with pytest.raises(tf.unsupported.UnsupportedError, match="tf.image.resize_bicubic"):
        tf.image.resize_bicubic  # noqa: B018
