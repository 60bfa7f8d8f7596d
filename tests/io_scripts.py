"""TF1 input-pipeline scripts as users write them (records, Examples, CSV, text, sparse tensors, strings, files),
written once against the TF1 API `tf` and run twice: with TensorFlow's tf.compat.v1 and with tfplus. Each takes
(tf, folder) and returns {name: value}: fetched values, and the bytes of the files it wrote. Examples whose bytes
are compared are serialized with deterministic=True: the order of a protobuf map on the wire is not canonical."""
from __future__ import annotations

import os

import numpy as np

RNG = np.random.RandomState(7)
IMAGES = RNG.randint(0, 256, (12, 4, 4, 1)).astype(np.uint8)
LABELS = RNG.randint(0, 3, 12).astype(np.int64)
IMAGES[::3, -1, -1] = 0  # records ending in NUL bytes, which NumPy's bytes dtype would drop


def _bytes(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _example(tf, image: np.ndarray, label: int):
    return tf.train.Example(features=tf.train.Features(feature={
        "image_raw": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image.tobytes()])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
        "height": tf.train.Feature(int64_list=tf.train.Int64List(value=[image.shape[0]])),
    }))


def mnist_tfrecords_train(tf, d):
    """Arrays -> TFRecords -> TFRecordDataset -> parse -> decode_raw -> reshape -> batch -> softmax model."""
    path = os.path.join(d, "train.tfrecords")
    with tf.python_io.TFRecordWriter(path) as writer:
        for image, label in zip(IMAGES, LABELS):
            writer.write(_example(tf, image, label).SerializeToString(deterministic=True))

    def parse(record):
        features = tf.parse_single_example(record, features={
            "image_raw": tf.FixedLenFeature([], tf.string), "label": tf.FixedLenFeature([], tf.int64)})
        image = tf.decode_raw(features["image_raw"], tf.uint8)
        image = tf.cast(tf.reshape(image, [16]), tf.float32) / 255.0
        return image, tf.cast(features["label"], tf.int32)

    ds = tf.data.TFRecordDataset([path]).map(parse).batch(4).repeat(2)
    x, y = ds.make_one_shot_iterator().get_next()
    w = tf.Variable(np.linspace(-0.5, 0.5, 48).reshape(16, 3).astype(np.float32))
    b = tf.Variable(np.zeros(3, np.float32))
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=tf.matmul(x, w) + b))
    train = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
    losses = []
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        while True:
            try:
                losses.append(sess.run([loss, train])[0])
            except tf.errors.OutOfRangeError:
                break
        weights = sess.run(w)
    return {"file": _bytes(path), "losses": np.array(losses), "w": weights}


def cifar_fixed_length(tf, d):
    """CIFAR-style binary records (a label byte, then a 3x4x4 image) between a header and a footer."""
    path = os.path.join(d, "data_batch_1.bin")
    body = b"".join(bytes([int(l)]) + im.repeat(3, axis=2).transpose(2, 0, 1).tobytes()
                    for im, l in zip(IMAGES, LABELS))
    with open(path, "wb") as f:
        f.write(b"HEAD" + body + b"FT")
    ds = tf.data.FixedLengthRecordDataset([path], 1 + 48, header_bytes=4, footer_bytes=2)

    def decode(record):
        raw = tf.decode_raw(record, tf.uint8)
        label = tf.cast(tf.strided_slice(raw, [0], [1]), tf.int32)
        image = tf.transpose(tf.reshape(tf.strided_slice(raw, [1], [49]), [3, 4, 4]), [1, 2, 0])
        return tf.cast(image, tf.float32), tf.reshape(label, [])

    images, labels = ds.map(decode).batch(5).make_one_shot_iterator().get_next()
    out = {}
    with tf.Session() as sess:
        for k in range(3):
            out[f"images{k}"], out[f"labels{k}"] = sess.run([images, labels])
    return out


def csv_regression(tf, d):
    """A CSV file with a header -> TextLineDataset.skip(1) -> decode_csv -> a linear model trained on it."""
    path = os.path.join(d, "data.csv")
    rows = np.random.RandomState(3).uniform(-1, 1, (16, 2))
    with open(path, "w") as f:
        f.write("x1,x2,name,y\n")
        for i, (a, b) in enumerate(rows):
            f.write(f"{a:.4f},{b:.4f},row{i},{3 * a - 2 * b + 0.5:.4f}\n")

    def parse(line):
        x1, x2, name, y = tf.decode_csv(line, record_defaults=[[0.0], [0.0], [""], [0.0]])
        return tf.stack([x1, x2]), y, name

    x, y, names = tf.data.TextLineDataset(path).skip(1).map(parse).batch(8).repeat(3) \
        .make_one_shot_iterator().get_next()
    w, b = tf.Variable(tf.zeros([2, 1])), tf.Variable(0.0)
    loss = tf.reduce_mean(tf.square(tf.squeeze(tf.matmul(x, w), 1) + b - y))
    train = tf.train.GradientDescentOptimizer(0.3).minimize(loss)
    losses = []
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        first_names = sess.run(names)
        for _ in range(5):
            losses.append(sess.run([loss, train])[0])
    return {"losses": np.array(losses), "names": first_names}


def text_string_split(tf, d):
    """Sentences -> tf.string_split -> a SparseTensor of words; to_dense with "" ; numbers parsed from words."""
    path = os.path.join(d, "corpus.txt")
    with open(path, "wb") as f:
        f.write(b"the cat sat\r\n3 14  15\nhello\n")
    lines = tf.data.TextLineDataset(path).batch(3).make_one_shot_iterator().get_next()
    words = tf.string_split(lines)
    dense = tf.sparse_tensor_to_dense(words, default_value="<pad>")
    chars = tf.string_split(tf.constant(["ab", "c"]), delimiter="")
    numbers = tf.string_to_number(tf.constant(["3", "-1.5", "2e3"]), out_type=tf.float32)
    ints = tf.strings.to_number(tf.constant([["7", "-8"]]), out_type=tf.int64)
    split2 = tf.strings.split(tf.constant(["a,b,,c", "d"]), sep=",")
    with tf.Session() as sess:
        w, dn, ch, nu, it, s2 = sess.run([words, dense, chars, numbers, ints, split2])
    return {"words": w, "dense": dn, "chars": ch, "numbers": nu, "ints": it, "split2": s2}


def sequence_example(tf, d):
    """A tf.train.SequenceExample (context + feature lists) parsed with parse_single_sequence_example."""
    ex = tf.train.SequenceExample()
    ex.context.feature["length"].int64_list.value.append(3)
    ex.context.feature["title"].bytes_list.value.append(b"seq")
    tokens = ex.feature_lists.feature_list["tokens"]
    for t in ([1, 2], [3, 4], [5, 6]):
        tokens.feature.add().int64_list.value.extend(t)
    ragged = ex.feature_lists.feature_list["ragged"]
    for t in ([0.5], [], [1.5, 2.5]):
        ragged.feature.add().float_list.value.extend(t)
    context, sequence = tf.parse_single_sequence_example(
        tf.constant(ex.SerializeToString()),
        context_features={"length": tf.FixedLenFeature([], tf.int64), "title": tf.FixedLenFeature([], tf.string),
                          "missing": tf.FixedLenFeature([2], tf.float32, default_value=[1.0, 2.0])},
        sequence_features={"tokens": tf.FixedLenSequenceFeature([2], tf.int64),
                           "ragged": tf.VarLenFeature(tf.float32),
                           "absent": tf.FixedLenSequenceFeature([], tf.int64, allow_missing=True)})
    with tf.Session() as sess:
        c, s = sess.run([context, sequence])
    return {"serialized": ex.SerializeToString(deterministic=True), **{f"c_{k}": v for k, v in c.items()},
            **{f"s_{k}": v for k, v in s.items()}}


def gzip_tfrecords(tf, d):
    """GZIP and ZLIB TFRecord files: written with TFRecordOptions, read by TFRecordDataset and tf_record_iterator."""
    out = {}
    for kind in ("GZIP", "ZLIB"):
        path = os.path.join(d, f"data.{kind.lower()}.tfrecord")
        options = tf.python_io.TFRecordOptions(getattr(tf.python_io.TFRecordCompressionType, kind))
        with tf.python_io.TFRecordWriter(path, options=options) as w:
            for i in range(5):
                w.write(_example(tf, IMAGES[i], LABELS[i]).SerializeToString(deterministic=True))
        out[f"file_{kind}"] = _bytes(path)
        out[f"iter_{kind}"] = list(tf.python_io.tf_record_iterator(path, options=options))
        record = tf.data.TFRecordDataset(path, compression_type=kind).make_one_shot_iterator().get_next()
        parsed = tf.parse_single_example(record, {"label": tf.FixedLenFeature([1], tf.int64)})
        with tf.Session() as sess:
            out[f"labels_{kind}"] = np.array([sess.run(parsed["label"]) for _ in range(5)])
    return out


def parse_example_batch(tf, d):
    """tf.parse_example on a batch: FixedLenFeature with defaults and shapes, VarLenFeature, FixedLenSequenceFeature."""
    def ex(i):
        e = tf.train.Example()
        f = e.features.feature
        f["id"].int64_list.value.append(i)
        f["scores"].float_list.value.extend([0.5 * i, -1.0 * i, 2.0, 1.0][: 1 + i % 4])
        f["tags"].bytes_list.value.extend([b"a", b"bc", b"d"][: i % 3])
        if i % 2:
            f["xy"].float_list.value.extend([i, i + 1.0, i + 2.0, i + 3.0])
        return e.SerializeToString()

    serialized = tf.placeholder(tf.string, [None])
    parsed = tf.parse_example(serialized, {
        "id": tf.FixedLenFeature([], tf.int64),
        "xy": tf.FixedLenFeature([2, 2], tf.float32, default_value=[[0.0, 0.0], [0.0, -1.0]]),
        "scores": tf.VarLenFeature(tf.float32),
        "tags": tf.VarLenFeature(tf.string),
        "seq": tf.FixedLenSequenceFeature([], tf.int64, allow_missing=True),
        "scores_dense": tf.FixedLenSequenceFeature([], tf.float32, allow_missing=True, default_value=-9.0)})
    parsed2 = tf.io.parse_example(serialized, {"scores": tf.io.FixedLenSequenceFeature(
        [], tf.float32, allow_missing=True, default_value=-9.0)})
    with tf.Session() as sess:
        out = sess.run(parsed, {serialized: [ex(i) for i in range(5)]})
        out2 = sess.run(parsed2, {serialized: [ex(i) for i in range(5)]})
    return {**out, "padded": out2["scores"]}


def sparse_model(tf, d):
    """sparse_placeholder fed with a SparseTensorValue, sparse_tensor_dense_matmul in a trained model, and
    embedding_lookup_sparse with each combiner."""
    sp = tf.sparse_placeholder(tf.float32)
    w = tf.Variable(np.arange(12, dtype=np.float32).reshape(4, 3) / 10.0)
    out = tf.sparse_tensor_dense_matmul(sp, w)
    loss = tf.reduce_sum(tf.square(out - 1.0))
    train = tf.train.GradientDescentOptimizer(0.05).minimize(loss)
    value = tf.SparseTensorValue(indices=np.array([[0, 0], [0, 3], [1, 1], [2, 2]], np.int64),
                                 values=np.array([1.0, 2.0, -1.0, 0.5], np.float32),
                                 dense_shape=np.array([3, 4], np.int64))
    params = tf.constant(np.arange(10, dtype=np.float32).reshape(5, 2))
    ids = tf.SparseTensor(indices=[[0, 0], [0, 1], [2, 0]], values=tf.constant([1, 3, 4], tf.int64),
                          dense_shape=[3, 2])
    weights = tf.SparseTensor(indices=[[0, 0], [0, 1], [2, 0]], values=[2.0, 1.0, 0.5], dense_shape=[3, 2])
    looks = {c: tf.nn.embedding_lookup_sparse(params, ids, weights, combiner=c) for c in ("sum", "mean", "sqrtn")}
    looks["none"] = tf.nn.embedding_lookup_sparse(params, ids, None)
    both = tf.sparse_add(tf.SparseTensor([[0, 1], [1, 0]], [1.0, 2.0], [2, 2]),
                         tf.SparseTensor([[0, 1], [1, 1]], [3.0, 4.0], [2, 2]))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        losses = [sess.run([loss, train], {sp: value})[0] for _ in range(4)]
        fetched = sess.run(sp, {sp: value})
        res = sess.run({**looks, "both": both, "w": w})
    return {"losses": np.array(losses), "fetched": fetched, **res}


def string_ops(tf, d):
    """tf.string_join, tf.strings.length, tf.substr, tf.regex_replace, tf.as_string, tf.reduce_join, upper,
    base64."""
    names = tf.constant(["alpha", "beta", "gamma"])
    nums = tf.constant([1.5, -2.25, 1000.0])
    ops = {
        "join": tf.string_join([names, tf.as_string(tf.constant([1, 2, 3]))], separator="_"),
        "length": tf.strings.length(names),
        "substr": tf.substr(names, 1, 3),
        "regex": tf.regex_replace(names, "a", "A"),
        "regex_first": tf.strings.regex_replace(names, "[aeiou]", "", replace_global=False),
        "as_string": tf.as_string(nums),
        "as_string_p": tf.as_string(nums, precision=2),
        "as_string_sci": tf.as_string(nums, scientific=True),
        "as_string_w": tf.as_string(tf.constant([7, -3]), width=4, fill="0"),
        "as_string_b": tf.as_string(tf.constant([True, False])),
        "reduce_join": tf.reduce_join(tf.constant([["a", "b"], ["c", "d"]]), axis=1, separator="-"),
        "upper": tf.strings.upper(names),
        "strip": tf.strings.strip(tf.constant([" x ", "y\n"])),
        "b64": tf.encode_base64(tf.constant([b"\xfb\xff?", b"ab"])),
        "b64_pad": tf.io.encode_base64(names, pad=True),
        "b64_back": tf.decode_base64(tf.encode_base64(tf.constant([b"\x00\xfe\xff", b""]))),
    }
    with tf.Session() as sess:
        return sess.run(ops)


def files_and_tensors(tf, d):
    """tf.write_file / tf.read_file, tf.io.gfile, tf.serialize_tensor / tf.parse_tensor, tf.matching_files."""
    folder = os.path.join(d, "sub", "dir")
    tf.io.gfile.makedirs(folder)
    path = os.path.join(folder, "blob.bin")
    write = tf.write_file(path, tf.constant(b"\x00\x01hello"))
    value = np.arange(6, dtype=np.float32).reshape(2, 3)
    ser = tf.serialize_tensor(tf.constant(value))
    back = tf.parse_tensor(ser, tf.float32)
    sstr = tf.serialize_tensor(tf.constant(["a", "bc"]))
    with tf.Session() as sess:
        sess.run(write)
        content = sess.run(tf.read_file(path))
        s, b, ss = sess.run([ser, back, sstr])
        matched = sess.run(tf.matching_files(os.path.join(d, "sub", "*", "*.bin")))
    with tf.io.gfile.GFile(os.path.join(folder, "t.txt"), "w") as f:
        f.write("hi")
    listing = sorted(tf.io.gfile.listdir(folder))
    globbed = [os.path.basename(p) for p in tf.io.gfile.glob(os.path.join(folder, "*.txt"))]
    tf.io.gfile.remove(os.path.join(folder, "t.txt"))
    return {"content": content, "serialized": s, "parsed": b, "serialized_str": ss,
            "matched": [os.path.relpath(m.decode(), d) for m in matched], "listing": listing, "glob": globbed,
            "exists": tf.io.gfile.exists(os.path.join(folder, "t.txt"))}


def decode_raw_dtypes(tf, d):
    """tf.decode_raw of every common dtype, little- and big-endian, on a batch of records."""
    arrays = {"float32": np.array([[1.5, -2.0], [3.25, 0.0]], np.float32), "int16": np.array([[1, -2], [300, 4]],
              np.int16), "float64": np.array([[np.pi, 1e300], [0.0, -1.0]]), "int64": np.array([[2**40, -1],
              [0, 5]], np.int64), "uint8": np.array([[0, 255], [7, 8]], np.uint8), "int32": np.array([[1, 2],
              [3, -4]], np.int32), "int8": np.array([[127, -1], [2, 3]], np.int8),
              "float16": np.array([[1.5, -2.0], [0.0, 65504.0]], np.float16)}
    out = {}
    with tf.Session() as sess:
        for name, a in arrays.items():
            records = tf.constant([row.tobytes() for row in a])
            out[name] = sess.run(tf.decode_raw(records, getattr(tf, name)))
            out[name + "_be"] = sess.run(tf.io.decode_raw(tf.constant(a[0].byteswap().tobytes()), getattr(tf, name),
                                                          little_endian=False))
    return out


def interleaved_files(tf, d):
    """Several TFRecord files read with num_parallel_reads through a fed filenames placeholder and an
    initializable iterator, twice."""
    paths = []
    for k in range(3):
        paths.append(os.path.join(d, f"part-{k}.tfrecord"))
        with tf.io.TFRecordWriter(paths[-1]) as w:
            for i in range(k + 2):
                w.write(f"file{k}-record{i}".encode())
    filenames = tf.placeholder(tf.string, [None])
    ds = tf.data.TFRecordDataset(filenames, num_parallel_reads=2)
    it = ds.make_initializable_iterator()
    nxt = it.get_next()
    out = {}
    with tf.Session() as sess:
        for run, names in (("all", paths), ("two", paths[1:])):
            sess.run(it.initializer, {filenames: names})
            got = []
            while True:
                try:
                    got.append(sess.run(nxt))
                except tf.errors.OutOfRangeError:
                    break
            out[run] = got
    return out


def corrupt_record(tf, d):
    """A damaged TFRecord file: the error is a DataLossError, from tf_record_iterator and from a dataset."""
    path = os.path.join(d, "bad.tfrecord")
    with tf.python_io.TFRecordWriter(path) as w:
        w.write(b"first record")
        w.write(b"second record")
    data = bytearray(_bytes(path))
    data[-6] ^= 0xFF  # inside the second record's data
    with open(path, "wb") as f:
        f.write(bytes(data))
    out = {}
    try:
        out["iterated"] = list(tf.python_io.tf_record_iterator(path))
    except tf.errors.DataLossError:
        out["iterator_error"] = "DataLossError"
    nxt = tf.data.TFRecordDataset(path).make_one_shot_iterator().get_next()
    with tf.Session() as sess:
        out["first"] = sess.run(nxt)
        try:
            sess.run(nxt)
        except tf.errors.DataLossError:
            out["dataset_error"] = "DataLossError"
    return out




def run_script(tf, script, folder) -> dict:
    """The script's results, in a fresh default graph of `tf`."""
    with tf.Graph().as_default():
        return script(tf, folder)


def same(a, b, where: str = "") -> None:
    """Asserts that two results are equal: arrays in dtype and value (floats to 1e-5), sparse tensors part by part,
    bytes and strings exactly."""
    if hasattr(a, "indices") and hasattr(a, "dense_shape"):
        for part in ("indices", "values", "dense_shape"):
            same(getattr(a, part), getattr(b, part), f"{where}.{part}")
        return
    if isinstance(a, dict):
        assert sorted(a) == sorted(b), (where, sorted(a), sorted(b))
        for k in a:
            same(a[k], b[k], f"{where}[{k}]")
        return
    if isinstance(a, (list, tuple)) and not isinstance(b, np.ndarray):
        assert len(a) == len(b), (where, a, b)
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")
        return
    x, y = np.asarray(a), np.asarray(b)
    assert x.shape == y.shape, (where, x.shape, y.shape, a, b)
    if x.dtype.kind in "fc":
        assert x.dtype == y.dtype, (where, x.dtype, y.dtype)
        np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-6, err_msg=where)
    else:
        assert x.dtype == y.dtype or {x.dtype.kind, y.dtype.kind} <= set("OS"), (where, x.dtype, y.dtype)
        assert x.tolist() == y.tolist(), (where, a, b)


def png_images(tf, d):
    """tf.image.encode_png -> tf.write_file -> tf.read_file -> tf.image.decode_png with each channel count."""
    image = np.random.RandomState(5).randint(0, 256, (6, 5, 3)).astype(np.uint8)
    path = os.path.join(d, "img.png")
    write = tf.write_file(path, tf.image.encode_png(tf.constant(image)))
    gray = tf.image.encode_png(tf.constant(image[..., :1]))
    with tf.Session() as sess:
        sess.run(write)
        contents = tf.read_file(path)
        out = {f"channels{c}": sess.run(tf.image.decode_png(contents, channels=c)) for c in (0, 3, 4)}
        for c in (0, 1, 3, 4):
            out[f"gray{c}"] = sess.run(tf.image.decode_png(gray, channels=c))
        out["decode_image"] = sess.run(tf.image.decode_image(contents))
    return out




def sparse_through_dataset(tf, d):
    """A VarLenFeature parsed in Dataset.map stays a SparseTensor through batch; to_dense after get_next."""
    path = os.path.join(d, "tags.tfrecord")
    with tf.python_io.TFRecordWriter(path) as w:
        for i in range(5):
            e = tf.train.Example()
            e.features.feature["tags"].int64_list.value.extend(range(i % 3))
            e.features.feature["id"].int64_list.value.append(i)
            w.write(e.SerializeToString())

    def parse(record):
        return tf.parse_single_example(record, {"tags": tf.VarLenFeature(tf.int64),
                                                "id": tf.FixedLenFeature([], tf.int64)})
    batch = tf.data.TFRecordDataset(path).map(parse).batch(2).make_one_shot_iterator().get_next()
    dense = tf.sparse.to_dense(batch["tags"], default_value=-1)
    out = {}
    with tf.Session() as sess:
        for k in range(3):
            tags, ids, dn = sess.run([batch["tags"], batch["id"], dense])
            out[f"tags{k}"], out[f"id{k}"], out[f"dense{k}"] = tags, ids, dn
    return out




def sharded_interleave(tf, d):
    """Sharded files: Dataset.list_files -> interleave(TFRecordDataset, cycle_length, block_length) -> parse ->
    batch; CSV shards with a header each through flat_map(TextLineDataset(f).skip(1)); tf.data.experimental's
    parallel_interleave and map_and_batch through Dataset.apply."""
    for k in range(4):
        with tf.python_io.TFRecordWriter(os.path.join(d, f"train-{k}.tfrecord")) as w:
            for i in range(k + 2):
                w.write(_example(tf, IMAGES[i], 10 * k + i).SerializeToString())
        with open(os.path.join(d, f"part-{k}.csv"), "w") as f:
            f.write("a,b\n" + "".join(f"{k},{i}\n" for i in range(k)))
    files = tf.data.Dataset.list_files(os.path.join(d, "train-*.tfrecord"), shuffle=False)
    records = files.interleave(tf.data.TFRecordDataset, cycle_length=2, block_length=2)
    labels = records.map(lambda r: tf.parse_single_example(r, {"label": tf.FixedLenFeature([], tf.int64)})["label"])
    batch = labels.batch(3).make_one_shot_iterator().get_next()
    csv = tf.data.Dataset.list_files(os.path.join(d, "part-*.csv"), shuffle=False) \
        .flat_map(lambda f: tf.data.TextLineDataset(f).skip(1)) \
        .map(lambda line: tf.decode_csv(line, [[0], [0]])).make_one_shot_iterator().get_next()
    applied = files.apply(tf.data.experimental.parallel_interleave(tf.data.TFRecordDataset, cycle_length=3)) \
        .apply(tf.data.experimental.map_and_batch(
            lambda r: tf.parse_single_example(r, {"label": tf.FixedLenFeature([], tf.int64)}), 4)) \
        .make_one_shot_iterator().get_next()
    out = {}
    with tf.Session() as sess:
        for name, fetch in (("labels", batch), ("csv", csv), ("applied", applied)):
            got = []
            while True:
                try:
                    got.append(sess.run(fetch))
                except tf.errors.OutOfRangeError:
                    break
            out[name] = got
    return out




def queue_readers(tf, d):
    """TF1's queue pipeline: string_input_producer(num_epochs) -> TFRecordReader / TextLineReader -> parse ->
    tf.train.batch (allow_smaller_final_batch), read until OutOfRangeError under a Coordinator."""
    paths = [os.path.join(d, f"q{k}.tfrecord") for k in range(2)]
    for k, path in enumerate(paths):
        with tf.python_io.TFRecordWriter(path) as w:
            for i in range(3 + k):
                w.write(_example(tf, IMAGES[i], 5 * k + i).SerializeToString())
    csv = os.path.join(d, "rows.csv")
    with open(csv, "w") as f:
        f.write("x,y\n1,2.5\n3,4.5\n5,6.5\n")
    queue = tf.train.string_input_producer(paths, num_epochs=2, shuffle=False)
    key, record = tf.TFRecordReader().read(queue)
    features = tf.parse_single_example(record, {"label": tf.FixedLenFeature([], tf.int64),
                                                "image_raw": tf.FixedLenFeature([], tf.string)})
    image = tf.reshape(tf.decode_raw(features["image_raw"], tf.uint8), [4, 4, 1])
    images, labels, keys = tf.train.batch([image, features["label"], key], batch_size=4,
                                          allow_smaller_final_batch=True)
    line_queue = tf.train.string_input_producer([csv], num_epochs=1, shuffle=False)
    _, line = tf.TextLineReader(skip_header_lines=1).read(line_queue)
    x, y = tf.decode_csv(line, [[0], [0.0]])
    xs = tf.train.batch({"x": x, "y": y}, batch_size=2, allow_smaller_final_batch=True)
    out = {"labels": [], "images": [], "keys": [], "xs": []}
    with tf.Session() as sess:
        sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess=sess, coord=coord)
        try:
            while True:
                out["xs"].append(sess.run(xs))
        except tf.errors.OutOfRangeError:
            pass
        try:
            while not coord.should_stop():
                im, lb, ks = sess.run([images, labels, keys])
                out["images"].append(im)
                out["labels"].append(lb)
                out["keys"] += [os.path.basename(k.decode()) for k in ks]
        except tf.errors.OutOfRangeError:
            pass
        finally:
            coord.request_stop()
        coord.join(threads)
    return out


SCRIPTS = [mnist_tfrecords_train, cifar_fixed_length, csv_regression, text_string_split, sequence_example,
           gzip_tfrecords, parse_example_batch, sparse_model, string_ops, files_and_tensors, decode_raw_dtypes,
           interleaved_files, corrupt_record, png_images, sparse_through_dataset,
           sharded_interleave, queue_readers]
