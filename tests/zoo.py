"""Model-zoo TF1 scripts beyond the tutorials (U-Net, pix2pix/CycleGAN, ESPCN/SRGAN, capsule networks, neural
style transfer, a YOLO-style loss, a Transformer encoder, WaveNet, actor-critic, freezing a graph), written once
against the TF1 API `tf` and run with TensorFlow's tf.compat.v1 and with tfplus, as tests/tutorials.py's scripts:
tiny shapes, synthetic data, a few training steps, every random op fed the same NumPy values (`Feeder`)."""
from __future__ import annotations

import numpy as np
from tutorials import Feeder, _session_run, _trained, contrib, data, one_hot_np


def _weight(tf, shape, stddev=0.1):
    return tf.Variable(tf.truncated_normal(shape, stddev=stddev))


def _instance_norm(tf):
    """tf.contrib.layers.instance_norm; for TensorFlow 2 (which has no contrib) TF1's definition written out."""
    if not hasattr(tf, "get_seed"):  # tfplus
        return tf.contrib.layers.instance_norm

    def instance_norm(inputs, epsilon=1e-6, activation_fn=None, scope=None):
        with tf.variable_scope(scope, default_name="InstanceNorm"):
            channels = inputs.shape.as_list()[-1]
            beta = tf.get_variable("beta", [channels], initializer=tf.zeros_initializer())
            gamma = tf.get_variable("gamma", [channels], initializer=tf.ones_initializer())
            mean, variance = tf.nn.moments(inputs, list(range(1, inputs.shape.ndims - 1)), keep_dims=True)
            y = tf.nn.batch_normalization(inputs, mean, variance, beta, gamma, epsilon)
            return y if activation_fn is None else activation_fn(y)
    return instance_norm


def _train(tf, sess, train_op, loss, feed, steps=3, extra=None):
    out = {"loss": []}
    for _ in range(steps):
        out["loss"].append(sess.run([train_op, loss], feed)[1])
    for key, tensor in (extra or {}).items():
        out[key] = sess.run(tensor, feed)
    out = _trained(tf, sess, {k: np.array(v) for k, v in out.items()})
    sess.close()
    return out


def unet(tf, feeder):
    """U-Net (jakeret/tf_unet, zhixuhao): down and up paths joined by concatenated skips, upsampling by
    conv2d_transpose and by resizing, a pixel-wise softmax and a dice loss beside the cross-entropy."""
    classes = 3
    x = tf.placeholder(tf.float32, [None, 8, 8, 1])
    y = tf.placeholder(tf.int32, [None, 8, 8])

    def conv(t, cin, cout):
        return tf.nn.relu(tf.nn.conv2d(t, _weight(tf, [3, 3, cin, cout]), [1, 1, 1, 1], "SAME")
                          + tf.Variable(tf.constant(0.1, shape=[cout])))

    down1 = conv(x, 1, 4)                                                    # 8x8
    pool1 = tf.nn.max_pool(down1, [1, 2, 2, 1], [1, 2, 2, 1], "VALID")      # 4x4
    down2 = conv(pool1, 4, 6)
    pool2 = tf.nn.max_pool(down2, [1, 2, 2, 1], [1, 2, 2, 1], "VALID")      # 2x2
    bottom = conv(pool2, 6, 8)
    x_shape = tf.shape(bottom)                                               # tf_unet's deconv2d
    output_shape = tf.stack([x_shape[0], x_shape[1] * 2, x_shape[2] * 2, x_shape[3] // 8 * 6])
    up2 = tf.nn.conv2d_transpose(bottom, _weight(tf, [2, 2, 6, 8]), output_shape, [1, 2, 2, 1], "SAME")
    up2 = conv(tf.concat([down2, tf.nn.relu(up2)], axis=3), 12, 6)
    up1 = tf.image.resize_images(up2, tf.shape(down1)[1:3])                  # bilinear, to the skip's size
    near = tf.image.resize_nearest_neighbor(bottom, [8, 8])
    corners = tf.image.resize_bilinear(pool1, [7, 7], align_corners=True)
    corners = tf.image.resize_images(corners, [8, 8], method=tf.image.ResizeMethod.NEAREST_NEIGHBOR)
    merged = tf.concat([down1, up1, near, corners], axis=-1)
    logits = tf.nn.conv2d(conv(merged, 4 + 6 + 8 + 4, 4), _weight(tf, [1, 1, 4, classes]), [1, 1, 1, 1], "SAME")
    probs = tf.nn.softmax(logits)
    onehot = tf.one_hot(y, classes)
    intersection = tf.reduce_sum(probs * onehot, axis=[1, 2])
    union = tf.reduce_sum(probs, axis=[1, 2]) + tf.reduce_sum(onehot, axis=[1, 2])
    dice = 1.0 - tf.reduce_mean(2.0 * intersection / (union + 1e-5))
    xent = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    loss = xent + dice
    train_op = tf.train.AdamOptimizer(0.01).minimize(loss)
    prediction = tf.argmax(probs, axis=3)
    xs, ys = data(30, ("f", (2, 8, 8, 1)), ("i", (2, 8, 8), classes))
    sess = _session_run(tf, feeder)
    return _train(tf, sess, train_op, loss, {x: xs, y: ys},
                  extra={"dice": dice, "prediction": prediction, "up1": up1, "near": near, "corners": corners})


def pix2pix(tf, feeder):
    """pix2pix / CycleGAN (affinelayer/pix2pix-tensorflow, xhujoy/CycleGAN-tensorflow): a generator with
    reflection padding, instance norm written out and a tanh output; a discriminator with
    tf.contrib.layers.instance_norm; a GAN loss with L1 (pix2pix)
    and a least-squares one (CycleGAN); two Adam optimizers over their own var_lists."""
    source = tf.placeholder(tf.float32, [2, 6, 6, 3])
    target = tf.placeholder(tf.float32, [2, 6, 6, 3])

    def instance_norm(t, name):
        with tf.variable_scope(name):
            depth = t.get_shape()[3]
            scale = tf.get_variable("scale", [depth], initializer=tf.random_normal_initializer(1.0, 0.02))
            offset = tf.get_variable("offset", [depth], initializer=tf.constant_initializer(0.0))
            mean, variance = tf.nn.moments(t, axes=[1, 2], keep_dims=True)
            return scale * (t - mean) * tf.rsqrt(variance + 1e-5) + offset

    def conv(t, cout, name, stride=1, pad="REFLECT"):
        with tf.variable_scope(name):
            w = tf.get_variable("w", [3, 3, t.get_shape()[-1], cout],
                                initializer=tf.truncated_normal_initializer(stddev=0.02))
            if pad:
                t = tf.pad(t, [[0, 0], [1, 1], [1, 1], [0, 0]], mode=pad)
            return tf.nn.conv2d(t, w, [1, stride, stride, 1], "VALID")

    def generator(t):
        with tf.variable_scope("generator"):
            h = tf.nn.relu(instance_norm(conv(t, 4, "c1"), "in1"))
            h = h + instance_norm(conv(tf.nn.relu(instance_norm(conv(h, 4, "r1"), "in2")), 4, "r2"), "in3")
            return tf.nn.tanh(conv(h, 3, "out", pad="SYMMETRIC"))

    def discriminator(t, reuse):
        with tf.variable_scope("discriminator", reuse=reuse):
            h = _instance_norm(tf)(conv(t, 4, "d1", stride=2, pad="CONSTANT"),
                                   activation_fn=lambda x: tf.nn.leaky_relu(x, alpha=0.2))   # CycleGAN's
            return conv(h, 1, "d2", pad=None)

    fake = generator(source)
    real_logits = discriminator(tf.concat([source, target], 3), False)
    fake_logits = discriminator(tf.concat([source, fake], 3), True)
    d_loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.ones_like(real_logits),
                                                                    logits=real_logits)
                            + tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.zeros_like(fake_logits),
                                                                      logits=fake_logits))
    l1 = tf.reduce_mean(tf.abs(target - fake))
    lsgan = tf.reduce_mean(tf.squared_difference(fake_logits, 1.0))
    g_loss = tf.reduce_mean(-tf.log(tf.sigmoid(fake_logits) + 1e-8)) + 100.0 * l1 + lsgan
    t_vars = tf.trainable_variables()
    d_vars = [v for v in t_vars if "discriminator" in v.name]
    g_vars = [v for v in t_vars if "generator" in v.name]
    d_optim = tf.train.AdamOptimizer(2e-4, beta1=0.5).minimize(d_loss, var_list=d_vars)
    g_optim = tf.train.AdamOptimizer(2e-4, beta1=0.5).minimize(g_loss, var_list=g_vars)
    src, tgt = data(31, ("f", (2, 6, 6, 3)), ("f", (2, 6, 6, 3)))
    feed = {source: src * 2 - 1, target: tgt * 2 - 1}
    sess = _session_run(tf, feeder)
    out = {"d_loss": [], "g_loss": []}
    for _ in range(3):
        out["d_loss"].append(sess.run([d_optim, d_loss], feed)[1])
        out["g_loss"].append(sess.run([g_optim, g_loss], feed)[1])
    out["fake"] = sess.run(fake, feed)
    out = _trained(tf, sess, {k: np.array(v) for k, v in out.items()})
    sess.close()
    return out


def espcn(tf, feeder):
    """ESPCN / SRGAN (tensorlayer/srgan, drakelevy/ESPCN): PReLU written out, sub-pixel upsampling by
    depth_to_space, a VGG-style perceptual loss on fixed features with the target's features stopped, PSNR."""
    scale = 2
    low = tf.placeholder(tf.float32, [2, 4, 4, 3])
    high = tf.placeholder(tf.float32, [2, 8, 8, 3])

    def prelu(t, name):
        alphas = tf.get_variable(name, t.get_shape()[-1], initializer=tf.constant_initializer(0.25))
        return tf.nn.relu(t) + alphas * (t - tf.abs(t)) * 0.5

    h = prelu(tf.nn.conv2d(low, _weight(tf, [3, 3, 3, 8]), [1, 1, 1, 1], "SAME"), "alpha1")
    h = tf.nn.conv2d(h, _weight(tf, [3, 3, 8, 3 * scale * scale]), [1, 1, 1, 1], "SAME")
    sr = tf.nn.tanh(tf.depth_to_space(h, scale))
    vgg = tf.constant(np.random.RandomState(32).standard_normal((3, 3, 3, 4)).astype(np.float32) * 0.3)

    def features(t):
        return tf.nn.relu(tf.nn.conv2d(t, vgg, [1, 1, 1, 1], "SAME"))

    perceptual = tf.reduce_mean(tf.square(features(sr) - tf.stop_gradient(features(high))))
    mse = tf.losses.mean_squared_error(high, sr)
    loss = mse + 0.1 * perceptual
    train_op = tf.train.AdamOptimizer(0.01).minimize(loss)
    packed = tf.space_to_depth(high, scale)
    roundtrip = tf.nn.depth_to_space(tf.nn.space_to_depth(high, 4), 4)
    lo, hi = data(32, ("f", (2, 4, 4, 3)), ("f", (2, 8, 8, 3)))
    sess = _session_run(tf, feeder)
    return _train(tf, sess, train_op, loss, {low: lo, high: hi},
                  extra={"sr": sr, "packed": packed, "roundtrip": roundtrip, "perceptual": perceptual,
                         "psnr": tf.image.psnr(sr, high, max_val=1.0)})


def capsnet(tf, feeder):
    """Capsule networks (naturomics/CapsNet-Tensorflow): squash, routing by agreement over tiled weights with
    rank-5 matmuls, capsule lengths by tf.norm and the margin loss."""
    batch, n_in, d_in, n_out, d_out = 3, 6, 4, 3, 5
    x = tf.placeholder(tf.float32, [batch, 10])
    labels = tf.placeholder(tf.int32, [batch])
    epsilon = 1e-9

    def squash(s, axis):
        squared = tf.reduce_sum(tf.square(s), axis, keepdims=True)
        return squared / (1 + squared) * s / tf.sqrt(squared + epsilon)

    primary = squash(tf.reshape(tf.layers.dense(x, n_in * d_in, name="primary"), [batch, n_in, d_in]), -1)
    W = tf.Variable(tf.random_normal([1, n_in, n_out, d_out, d_in], stddev=0.1))
    u = tf.tile(primary[:, :, None, :, None], [1, 1, n_out, 1, 1])
    u_hat = tf.matmul(tf.tile(W, [batch, 1, 1, 1, 1]), u)                            # [b, in, out, d_out, 1]
    u_hat_einsum = tf.einsum("ijkl,bil->bijk", W[0], primary)
    u_hat_stopped = tf.stop_gradient(u_hat)
    b = tf.zeros([batch, n_in, n_out, 1, 1])
    for r in range(3):
        c = tf.nn.softmax(b, axis=2)
        s = tf.reduce_sum(c * (u_hat if r == 2 else u_hat_stopped), axis=1, keepdims=True)
        v = squash(s, -2)                                                               # [b, 1, out, d_out, 1]
        if r < 2:
            b += tf.matmul(u_hat_stopped, tf.tile(v, [1, n_in, 1, 1, 1]), transpose_a=True)
    lengths = tf.norm(tf.squeeze(v, [1, 4]), axis=-1)
    T = tf.one_hot(labels, n_out)
    margin = T * tf.square(tf.maximum(0.0, 0.9 - lengths)) + 0.5 * (1 - T) * tf.square(tf.maximum(0.0, lengths - 0.1))
    loss = tf.reduce_mean(tf.reduce_sum(margin, axis=1))
    train_op = tf.train.AdamOptimizer(0.01).minimize(loss)
    xs, ys = data(33, ("n", (batch, 10)), ("i", (batch,), n_out))
    sess = _session_run(tf, feeder)
    return _train(tf, sess, train_op, loss, {x: xs, labels: ys},
                  extra={"lengths": lengths, "einsum": u_hat_einsum, "u_hat": u_hat,
                         "frobenius": tf.norm(W), "l1": tf.norm(primary, ord=1, axis=[1, 2])})


def style_transfer(tf, feeder):
    """Neural style transfer (anishathalye/neural-style): an image variable optimized by Adam against content and
    gram-matrix style losses on fixed features and a total-variation term, clipped to [0, 1] after each step."""
    content, style = data(34, ("f", (1, 8, 8, 3)), ("f", (1, 8, 8, 3)))
    rng = np.random.RandomState(34)
    layers = [tf.constant(rng.standard_normal(s).astype(np.float32) * 0.4) for s in ((3, 3, 3, 4), (3, 3, 4, 6))]

    def net(t):
        feats = []
        for w in layers:
            t = tf.nn.relu(tf.nn.conv2d(t, w, [1, 1, 1, 1], "SAME"))
            feats.append(t)
            t = tf.nn.avg_pool(t, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
        return feats

    def gram(f):
        _, h, w, c = f.get_shape().as_list()
        flat = tf.reshape(f, [-1, c])
        return tf.matmul(tf.transpose(flat), flat) / (h * w * c)

    image = tf.Variable(content + 0.1 * tf.random_normal([1, 8, 8, 3]), name="image")
    content_feats = net(tf.constant(content))
    style_grams = [gram(f) for f in net(tf.constant(style))]
    feats = net(image)
    content_loss = 2 * tf.nn.l2_loss(feats[1] - content_feats[1]) / 100.0
    style_loss = tf.add_n([2 * tf.nn.l2_loss(gram(f) - g) for f, g in zip(feats, style_grams)])
    tv = tf.reduce_sum(tf.abs(image[:, 1:, :, :] - image[:, :-1, :, :])) + tf.reduce_sum(
        tf.abs(image[:, :, 1:, :] - image[:, :, :-1, :]))
    loss = content_loss + 5.0 * style_loss + 0.01 * tv + 0.01 * tf.reduce_sum(tf.image.total_variation(image))
    train_op = tf.train.AdamOptimizer(0.05, beta1=0.9, beta2=0.999, epsilon=1e-8).minimize(loss)
    clip = tf.assign(image, tf.clip_by_value(image, 0.0, 1.0))
    sess = _session_run(tf, feeder)
    losses = []
    for _ in range(4):
        losses.append(sess.run([train_op, loss])[1])
        sess.run(clip)
    out = {"loss": np.array(losses), "image": sess.run(image)}
    sess.close()
    return out


def yolo_loss(tf, feeder):
    """A YOLO-style detection loss (hizhangp/yolo_tensorflow, experiencor/keras-yolo2): IoU written out, square
    roots of clipped sizes, tf.where and tf.boolean_mask over the responsible cells; non-max suppression on the
    predicted boxes (forward only)."""
    batch, cells = 2, 3
    images = tf.placeholder(tf.float32, [batch, 6, 6, 2])
    truth = tf.placeholder(tf.float32, [batch, cells, cells, 4])     # x, y, w, h in [0, 1]
    has_object = tf.placeholder(tf.float32, [batch, cells, cells])
    h = tf.nn.relu(tf.nn.conv2d(images, _weight(tf, [3, 3, 2, 6]), [1, 2, 2, 1], "SAME"))
    pred = tf.nn.conv2d(h, _weight(tf, [1, 1, 6, 5]), [1, 1, 1, 1], "SAME")
    pred_xy = tf.sigmoid(pred[..., 0:2])
    pred_wh = tf.sigmoid(pred[..., 2:4])
    pred_conf = tf.sigmoid(pred[..., 4])

    def corners(xy, wh):
        return xy - wh / 2.0, xy + wh / 2.0

    p_min, p_max = corners(pred_xy, pred_wh)
    t_min, t_max = corners(truth[..., 0:2], truth[..., 2:4])
    inter_wh = tf.maximum(tf.minimum(p_max, t_max) - tf.maximum(p_min, t_min), 0.0)
    inter = inter_wh[..., 0] * inter_wh[..., 1]
    union = pred_wh[..., 0] * pred_wh[..., 1] + truth[..., 2] * truth[..., 3] - inter
    iou = tf.clip_by_value(inter / tf.maximum(union, 1e-10), 0.0, 1.0)
    coord = has_object[..., None] * (tf.square(pred_xy - truth[..., 0:2]) + tf.square(
        tf.sqrt(tf.clip_by_value(pred_wh, 1e-10, 1.0)) - tf.sqrt(truth[..., 2:4])))
    conf_target = tf.where(has_object > 0.5, tf.stop_gradient(iou), tf.zeros_like(iou))
    conf_scale = tf.where(has_object > 0.5, tf.ones_like(iou), 0.5 * tf.ones_like(iou))
    conf = conf_scale * tf.square(pred_conf - conf_target)
    object_conf = tf.boolean_mask(pred_conf, has_object > 0.5)
    loss = 5.0 * tf.reduce_sum(coord) / batch + tf.reduce_sum(conf) / batch
    train_op = tf.train.MomentumOptimizer(0.05, 0.9).minimize(loss)
    boxes = tf.reshape(tf.concat([p_min[..., ::-1], p_max[..., ::-1]], -1), [-1, 4])   # [y1, x1, y2, x2]
    scores = tf.reshape(pred_conf, [-1])
    keep = tf.image.non_max_suppression(boxes, scores, max_output_size=4, iou_threshold=0.3)
    kept_boxes = tf.gather(boxes, keep)
    xs, t, obj = data(35, ("f", (batch, 6, 6, 2)), ("f", (batch, cells, cells, 4)), ("i", (batch, cells, cells), 2))
    t[..., 2:] = 0.1 + 0.8 * t[..., 2:]
    sess = _session_run(tf, feeder)
    return _train(tf, sess, train_op, loss, {images: xs, truth: t, has_object: obj.astype(np.float32)},
                  extra={"iou": iou, "object_conf": object_conf, "keep": keep, "kept_boxes": kept_boxes})


def transformer_encoder(tf, feeder):
    """A Transformer encoder classifier (Kyubyong/transformer's modules): sinusoidal positions from
    tf.range/sin/cos, multi-head attention with padding masks (-1e9 before tf.nn.softmax(axis=-1)),
    tf.contrib.layers.layer_norm, masked mean pooling."""
    batch, seq, d_model, heads, vocab, classes = 3, 6, 8, 2, 13, 4
    tokens = tf.placeholder(tf.int32, [batch, seq])
    lengths = tf.placeholder(tf.int32, [batch])
    labels = tf.placeholder(tf.int32, [batch])
    embedding = tf.Variable(tf.random_uniform([vocab, d_model], -0.5, 0.5))
    position = tf.cast(tf.range(seq), tf.float32)[:, None]
    i = tf.cast(tf.range(d_model), tf.float32)[None, :]
    angle = position / tf.pow(10000.0, 2.0 * tf.floor(i / 2.0) / d_model)
    even = tf.cast(tf.equal(tf.mod(tf.range(d_model), 2), 0), tf.float32)[None, :]
    pos = even * tf.sin(angle) + (1.0 - even) * tf.cos(angle)
    x = tf.nn.embedding_lookup(embedding, tokens) + pos
    mask = tf.sequence_mask(lengths, maxlen=seq, dtype=tf.float32)                  # [b, seq]
    for layer in range(2):
        with tf.variable_scope(f"block{layer}"):
            # No biases: the keys' bias has a zero gradient, which Adam would turn into rounding noise's sign.
            qkv = tf.layers.dense(x, 3 * d_model, use_bias=False, name="qkv")
            q, k, v = tf.split(qkv, 3, axis=-1)
            q, k, v = (tf.concat(tf.split(t, heads, axis=2), axis=0) for t in (q, k, v))  # [h*b, seq, d/h]
            scores = tf.matmul(q, k, transpose_b=True) / (d_model // heads) ** 0.5
            key_mask = tf.tile(mask, [heads, 1])[:, None, :]
            scores = scores + (1.0 - key_mask) * -1e9
            attention = tf.nn.softmax(scores, axis=-1)
            context = tf.concat(tf.split(tf.matmul(attention, v), heads, axis=0), axis=2)
            x = contrib(tf).layers.layer_norm(x + tf.layers.dense(context, d_model, name="proj"),
                                              begin_norm_axis=-1, scope="ln1")
            ffn = tf.layers.dense(tf.layers.dense(x, 16, activation=tf.nn.relu, name="ff1"), d_model, name="ff2")
            x = contrib(tf).layers.layer_norm(x + ffn, begin_norm_axis=-1, scope="ln2")
    pooled = tf.reduce_sum(x * mask[..., None], 1) / tf.reduce_sum(mask, 1, keepdims=True)
    logits = tf.layers.dense(pooled, classes, name="classifier")
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    train_op = tf.train.AdamOptimizer(0.01, beta2=0.98, epsilon=1e-9).minimize(loss)
    toks, ys = data(36, ("i", (batch, seq), vocab), ("i", (batch,), classes))
    sess = _session_run(tf, feeder)
    return _train(tf, sess, train_op, loss, {tokens: toks, lengths: [6, 4, 1], labels: ys},
                  extra={"attention": attention, "positions": pos})


def wavenet(tf, feeder):
    """WaveNet (ibab/tensorflow-wavenet): causal dilated 1-D convolutions (left padding, tf.nn.convolution with
    dilation_rate and tf.nn.conv1d; tf.layers.conv1d's padding="causal"), gated tanh * sigmoid units, residual
    and skip connections, a softmax over quantized samples."""
    batch, steps, channels, quant = 2, 12, 4, 6
    samples = tf.placeholder(tf.int32, [batch, steps + 1])
    inputs = tf.one_hot(samples[:, :-1], quant)
    h = tf.nn.conv1d(inputs, _weight(tf, [1, quant, channels]), stride=1, padding="VALID")
    skips = []
    for dilation in (1, 2, 4):
        padded = tf.pad(h, [[0, 0], [dilation, 0], [0, 0]])
        filt = tf.nn.convolution(padded, _weight(tf, [2, channels, channels]), "VALID", dilation_rate=[dilation])
        gate = tf.nn.convolution(padded, _weight(tf, [2, channels, channels]), "VALID", dilation_rate=[dilation])
        out = tf.tanh(filt) * tf.sigmoid(gate)
        transformed = tf.nn.conv1d(out, _weight(tf, [1, channels, channels]), 1, "SAME")
        skips.append(tf.nn.conv1d(out, _weight(tf, [1, channels, channels]), 1, "SAME"))
        h = h + transformed
    # The tf.layers form of a causal dilated convolution (fast-wavenet's).
    skips.append(tf.layers.conv1d(h, channels, 2, padding="causal", dilation_rate=8, name="causal8",
                                  kernel_initializer=tf.truncated_normal_initializer(stddev=0.1)))
    total = tf.nn.relu(tf.add_n(skips))
    logits = tf.nn.conv1d(total, _weight(tf, [1, channels, quant]), 1, "SAME")
    loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits_v2(labels=tf.one_hot(samples[:, 1:], quant),
                                                                     logits=logits))
    train_op = tf.train.AdamOptimizer(0.01, epsilon=1e-4).minimize(loss)
    (s,) = data(37, ("i", (batch, steps + 1), quant))
    sess = _session_run(tf, feeder)
    return _train(tf, sess, train_op, loss, {samples: s}, extra={"probs": tf.nn.softmax(logits)})


def actor_critic(tf, feeder):
    """A3C / actor-critic (openai/universe-starter-agent, MorvanZhou): a policy and a value head, the policy
    gradient on advantages, an entropy bonus from log_softmax, and a target network tracking the trained one by
    soft updates (DDPG's tf.assign(t, tau * w + (1 - tau) * t))."""
    batch, state_dim, actions, tau = 5, 4, 3, 0.1
    state = tf.placeholder(tf.float32, [batch, state_dim])
    action = tf.placeholder(tf.int32, [batch])
    ret = tf.placeholder(tf.float32, [batch])

    def network(scope, trainable):
        with tf.variable_scope(scope):
            hidden = tf.layers.dense(state, 8, tf.nn.relu, trainable=trainable, name="hidden",
                                     kernel_initializer=tf.random_normal_initializer(0.0, 0.3))
            logits = tf.layers.dense(hidden, actions, trainable=trainable, name="pi",
                                     kernel_initializer=tf.random_normal_initializer(0.0, 0.3))
            value = tf.squeeze(tf.layers.dense(hidden, 1, trainable=trainable, name="v"), axis=1)
        return logits, value

    logits, value = network("online", True)
    _, target_value = network("target", False)
    log_probs = tf.nn.log_softmax(logits)
    probs = tf.nn.softmax(logits)
    entropy = -tf.reduce_sum(probs * log_probs, axis=1)
    advantage = tf.stop_gradient(ret - value)
    log_prob_a = tf.reduce_sum(log_probs * tf.one_hot(action, actions), axis=1)
    pi_loss = -tf.reduce_sum(log_prob_a * advantage)
    vf_loss = 0.5 * tf.reduce_sum(tf.square(value - ret))
    loss = pi_loss + 0.5 * vf_loss - 0.01 * tf.reduce_sum(entropy)
    grads = tf.gradients(loss, tf.trainable_variables())
    grads, global_norm = tf.clip_by_global_norm(grads, 40.0)
    train_op = tf.train.RMSPropOptimizer(0.01, decay=0.99, epsilon=0.1).apply_gradients(
        zip(grads, tf.trainable_variables()))
    online = tf.get_collection(tf.GraphKeys.GLOBAL_VARIABLES, scope="online")
    target = tf.get_collection(tf.GraphKeys.GLOBAL_VARIABLES, scope="target")
    soft_update = tf.group(*[tf.assign(t, tau * w + (1 - tau) * t) for w, t in zip(online, target)])
    hard_update = [t.assign(w) for w, t in zip(online, target)]
    sample = tf.argmax(logits - tf.log(-tf.log(tf.random_uniform(tf.shape(logits)))), axis=1)
    s, a, r = data(38, ("n", (batch, state_dim)), ("i", (batch,), actions), ("n", (batch,)))
    feed = {state: s, action: a, ret: r}
    sess = _session_run(tf, feeder)
    sess.run(hard_update)
    out = {"loss": [], "entropy": [], "target_value": []}
    for _ in range(3):
        out["loss"].append(sess.run([train_op, loss], feed)[1])
        sess.run(soft_update)
        out["entropy"].append(sess.run(entropy, feed))
        out["target_value"].append(sess.run(target_value, feed))
    out["global_norm"] = sess.run(global_norm, feed)
    out["sample"] = sess.run(sample, {**feed, **feeder.feeds(tf)})
    out = _trained(tf, sess, {k: np.array(v) for k, v in out.items()}, [v.op.name for v in online + target])
    sess.close()
    return out


def seq2seq_attention(tf, feeder):
    """tf.contrib.seq2seq's NMT training graph (tensorflow/nmt): an encoder, BahdanauAttention in an
    AttentionWrapper, TrainingHelper + BasicDecoder + dynamic_decode and a sequence loss."""
    batch, src_len, tgt_len, vocab, units = 2, 5, 4, 7, 6
    source = tf.placeholder(tf.int32, [batch, src_len])
    target = tf.placeholder(tf.int32, [batch, tgt_len])
    embedding = tf.Variable(tf.random_uniform([vocab, units], -0.5, 0.5))
    encoder_out, encoder_state = tf.nn.dynamic_rnn(tf.nn.rnn_cell.GRUCell(units),
                                                   tf.nn.embedding_lookup(embedding, source), dtype=tf.float32)
    attention = tf.contrib.seq2seq.BahdanauAttention(units, encoder_out)
    cell = tf.contrib.seq2seq.AttentionWrapper(tf.nn.rnn_cell.GRUCell(units), attention, attention_layer_size=units)
    helper = tf.contrib.seq2seq.TrainingHelper(tf.nn.embedding_lookup(embedding, target), [tgt_len] * batch)
    decoder = tf.contrib.seq2seq.BasicDecoder(cell, helper, cell.zero_state(batch, tf.float32),
                                              output_layer=tf.layers.Dense(vocab))
    outputs, _, _ = tf.contrib.seq2seq.dynamic_decode(decoder)
    loss = tf.contrib.seq2seq.sequence_loss(outputs.rnn_output, target, tf.ones([batch, tgt_len]))
    train_op = tf.train.AdamOptimizer(0.01).minimize(loss)
    src, tgt = data(39, ("i", (batch, src_len), vocab), ("i", (batch, tgt_len), vocab))
    sess = _session_run(tf, feeder)
    return _train(tf, sess, train_op, loss, {source: src, target: tgt})


def freeze_graph(tf, feeder):
    """Freezing a trained graph (tensorflow/python/tools/freeze_graph.py's steps): variables to constants,
    training nodes removed, the inference subgraph extracted, serialized, and the frozen GraphDef imported into a
    fresh graph and run."""
    x = tf.placeholder(tf.float32, [None, 5], name="input")
    y = tf.placeholder(tf.int32, [None], name="labels")
    with tf.variable_scope("model"):
        hidden = tf.layers.dense(x, 6, tf.nn.relu, name="hidden")
        with tf.control_dependencies([tf.check_numerics(hidden, "hidden")]):
            hidden = tf.identity(hidden, name="checked")
        logits = tf.layers.dense(hidden, 3, name="logits")
    probs = tf.nn.softmax(logits, name="output")
    loss = tf.losses.sparse_softmax_cross_entropy(y, logits)
    train_op = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
    xs, ys = data(40, ("n", (4, 5)), ("i", (4,), 3))
    sess = _session_run(tf, feeder)
    for _ in range(2):
        sess.run(train_op, {x: xs, y: ys})
    want = sess.run(probs, {x: xs})
    graph_def = tf.get_default_graph().as_graph_def()
    frozen = tf.graph_util.convert_variables_to_constants(sess, graph_def, ["output"])
    sess.close()
    frozen = tf.graph_util.extract_sub_graph(frozen, ["output"])
    frozen = tf.graph_util.remove_training_nodes(frozen, protected_nodes=["input"])
    blob = frozen.SerializeToString()
    ops = sorted({node.op for node in frozen.node})
    with tf.Graph().as_default() as graph:
        restored = tf.GraphDef()
        restored.ParseFromString(blob)
        (output,) = tf.import_graph_def(restored, return_elements=["output:0"], name="frozen")
        with tf.Session(graph=graph) as sess:
            got = sess.run(output, {graph.get_tensor_by_name("frozen/input:0"): xs})
    return {"trained": want, "frozen": got, "ops": np.array(ops), "nodes": np.array(len(frozen.node))}


SCRIPTS = {f.__name__: f for f in (unet, pix2pix, espcn, capsnet, style_transfer, yolo_loss, transformer_encoder,
                                   wavenet, actor_critic, seq2seq_attention, freeze_graph)}


def run_script(tf, name: str, feeder: Feeder) -> dict:
    """Runs script `name` in a fresh default graph of `tf`."""
    tf.reset_default_graph()
    with tf.Graph().as_default():
        return SCRIPTS[name](tf, feeder)


__all__ = ["SCRIPTS", "run_script", "one_hot_np"]
