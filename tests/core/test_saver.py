"""Saver: round trip, metadata, checksum, validation before any assignment, atomic writes, max_to_keep and the
`checkpoint` state file. Every test runs for both formats the Saver writes (TensorFlow's, the default, and
tfplus's earlier one-file format); tests/tf_oracle/test_tf_checkpoints.py checks TensorFlow reads ours and we
read its."""
import hashlib
import os
import shutil
import tracemalloc
import warnings

import numpy as np
import pytest

import tfplus as tf
from tfplus.proto import checkpoint_pb2, tensor_pb2
from tfplus.train import saver as saver_lib
from tfplus.train.saver import Saver, get_checkpoint_state, latest_checkpoint, list_variables, load_variable

read_checkpoint_metadata = saver_lib.read_checkpoint_metadata


@pytest.fixture(autouse=True, params=saver_lib.FORMATS)
def fmt(request, monkeypatch):
    """Runs the test with every `Saver` (the name this module uses) writing format `request.param`."""
    class FormatSaver(saver_lib.Saver):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, format=request.param, **kwargs)
    monkeypatch.setitem(globals(), "Saver", FormatSaver)
    return request.param


def _files(fmt, *names, meta=True):
    """What os.listdir shows for checkpoints `names` of format `fmt`, sorted, with a "checkpoint" state file (and
    each one's MetaGraphDef `.meta`, which Saver.save writes unless write_meta_graph=False)."""
    metas = [n + ".meta" for n in names] if meta else []
    if fmt == "tensorflow":
        names = [f for n in names for f in (n + ".data-00000-of-00001", n + ".index")]
    return sorted(["checkpoint", *names, *metas])


def _exists(path) -> bool:
    return bool(saver_lib._checkpoint_files(str(path)))


def _snapshot(path) -> dict:
    """{file: bytes} of a checkpoint's files."""
    return {f: open(f, "rb").read() for f in saver_lib._checkpoint_files(str(path))}


def _graph(w_shape=(2, 3), b_dtype=tf.int32):
    """Variables a (float32 (4,)), w (float32 w_shape), b (b_dtype (2,)). `a` comes first, so a restore that
    assigned before validating would already have changed it when w fails."""
    g = tf.Graph()
    with g.as_default():
        a = tf.Variable(np.float32([1, 2, 3, 4]), name="a")
        w = tf.Variable(np.arange(np.prod(w_shape), dtype=np.float32).reshape(w_shape), name="layer/w")
        b = tf.Variable(np.array([7, 8], b_dtype.np), name="b")
        tf.global_variables_initializer()
    return g, (a, w, b)


def _saver(g, *args, **kwargs):
    with g.as_default():
        return Saver(*args, **kwargs)


def _session(g):
    sess = tf.Session(graph=g)
    sess.run("init")
    return sess


def _values(sess, variables):
    return [sess.run(v) for v in variables]


def test_round_trip_into_a_new_graph_and_meta(tmp_path):
    g, vs = _graph()
    sess = _session(g)
    for v in vs:
        v.load(sess.run(v) * 3, session=sess)
    saved = _values(sess, vs)
    meta = {"epoch": 3, "rng": {"state": 2**70, "inc": [1, 2]}, "name": "mentee"}
    path = _saver(g, max_to_keep=None).save(sess, str(tmp_path / "model.ckpt"), metadata=meta)
    assert path == str(tmp_path / "model.ckpt") and _exists(path) and tf.train.checkpoint_exists(path)
    assert not tf.train.checkpoint_exists(str(tmp_path / "other")) and not tf.train.checkpoint_exists(str(tmp_path))
    g2, vs2 = _graph()
    sess2 = _session(g2)
    saver2 = _saver(g2)
    saver2.restore(sess2, path)
    for a, b in zip(saved, _values(sess2, vs2)):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    assert read_checkpoint_metadata(path) == meta == Saver.read_meta(path)
    assert list_variables(path) == [("a", [4]), ("b", [2]), ("layer/w", [2, 3])]
    assert load_variable(str(tmp_path), "layer/w").tobytes() == saved[1].tobytes()
    assert g2.get_operation_by_name("save/restore_all").type == "NoOp"


def test_global_step_names_the_file_and_no_meta_reads_empty(tmp_path):
    g, vs = _graph()
    with g.as_default():
        step = tf.Variable(np.int64(41), name="global_step", trainable=False)
    sess = _session(g)
    sess.run(step.initializer)
    saver = _saver(g)
    assert saver.save(sess, str(tmp_path / "m"), global_step=step) == str(tmp_path / "m-41")
    assert saver.save(sess, str(tmp_path / "m"), global_step=np.int32(5)) == str(tmp_path / "m-5")
    assert read_checkpoint_metadata(str(tmp_path / "m-5")) == {}
    with pytest.raises(TypeError, match="metadata must be a dict"):
        saver.save(sess, str(tmp_path / "m"), metadata=[1])


def test_var_list_dict_and_keys(tmp_path):
    g, (a, w, b) = _graph()
    sess = _session(g)
    path = Saver({"first": a, "second": b}).save(sess, str(tmp_path / "m"))
    assert [k for k, _ in list_variables(path)] == ["first", "second"]
    g2, (a2, w2, b2) = _graph()
    sess2 = _session(g2)
    with g2.as_default():
        Saver({"first": a2}).restore(sess2, path)  # a subset of the checkpoint is fine
    with pytest.raises(ValueError, match="two variables would be saved under the key 'a'"):
        Saver([a, a])
    with pytest.raises(TypeError, match="is not a variable"):
        Saver([a.value()])
    with tf.Graph().as_default(), pytest.raises(ValueError, match="no variables to save"):
        Saver()


def test_corrupted_checkpoint_raises_data_loss(tmp_path, fmt):
    g, vs = _graph()
    sess = _session(g)
    saver = _saver(g)
    path = saver.save(sess, str(tmp_path / "m"), metadata={"epoch": 1})
    if fmt == "tensorflow":
        def read_all():
            reader = saver_lib.NewCheckpointReader(path)
            return [reader.get_tensor(k) for k in reader.get_variable_to_shape_map()], reader.metadata()
        for file, data in _snapshot(path).items():
            # index: its first block, its index block's trailer; data: the metadata, the last variable
            for where in (3, len(data) - (55 if file.endswith(".index") else 5)):
                bad = bytearray(data)
                bad[where] ^= 0x01
                open(file, "wb").write(bytes(bad))
                with pytest.raises(tf.errors.DataLossError, match=repr(path)):
                    read_all()
            open(file, "wb").write(data[:-10])
            with pytest.raises(tf.errors.DataLossError, match=repr(path)):
                saver.restore(sess, path)
            open(file, "wb").write(data)
        saver.restore(sess, path)
        assert read_all()[1] == {"epoch": 1}
        os.remove(path + ".index")
        with pytest.raises(tf.errors.NotFoundError, match="does not exist"):
            saver.restore(sess, path)
        return
    data = open(path, "rb").read()
    for where in (len(data) - 5, 20, 3):  # payload, checksum, magic
        bad = bytearray(data)
        bad[where] ^= 0x01
        open(path, "wb").write(bytes(bad))
        with pytest.raises(tf.errors.DataLossError, match=repr(path)):
            saver.restore(sess, path)
    open(path, "wb").write(data[:-10])
    with pytest.raises(tf.errors.DataLossError, match="SHA-256 does not match"):
        saver.restore(sess, path)
    with pytest.raises(tf.errors.DataLossError, match="corrupted"):
        read_checkpoint_metadata(path)
    with pytest.raises(tf.errors.NotFoundError, match="does not exist"):
        saver.restore(sess, str(tmp_path / "nothing"))
    with pytest.raises(ValueError, match="save_path is None"):
        saver.restore(sess, None)


def test_shape_mismatch_is_clear_and_changes_nothing(tmp_path):
    g, vs = _graph()
    path = _saver(g).save(_session(g), str(tmp_path / "m"))
    g2, vs2 = _graph(w_shape=(3, 2))
    sess2 = _session(g2)
    before = _values(sess2, vs2)
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        _saver(g2).restore(sess2, path)
    msg = str(info.value)
    assert "'layer/w'" in msg and "(2, 3)" in msg and "(3, 2)" in msg and repr(path) in msg
    assert all(x.tobytes() == y.tobytes() for x, y in zip(before, _values(sess2, vs2)))


def test_dtype_mismatch_and_missing_variable(tmp_path):
    g, vs = _graph()
    path = _saver(g).save(_session(g), str(tmp_path / "m"))
    g2, vs2 = _graph(b_dtype=tf.int64)
    sess2 = _session(g2)
    before = _values(sess2, vs2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="as int32 but the graph.s variable is int64"):
        _saver(g2).restore(sess2, path)
    assert all(x.tobytes() == y.tobytes() for x, y in zip(before, _values(sess2, vs2)))
    with g2.as_default():
        extra = tf.Variable(np.float32(0), name="extra")
    sess2.run(extra.initializer)
    with pytest.raises(tf.errors.NotFoundError, match=r"'extra' not found in checkpoint '.*/m'"):
        Saver([vs2[0], extra]).restore(sess2, path)
    assert sess2.run(vs2[0]).tobytes() == before[0].tobytes()


def test_session_of_another_graph_is_rejected(tmp_path):
    g, _ = _graph()
    g2, _ = _graph()
    with pytest.raises(ValueError, match="different graph"):
        Saver(g.get_collection(tf.GraphKeys.GLOBAL_VARIABLES)).save(_session(g2), str(tmp_path / "m"))


def test_failed_write_leaves_no_partial_file_and_keeps_the_old_one(tmp_path, monkeypatch, fmt):
    g, vs = _graph()
    sess = _session(g)
    saver = _saver(g)
    path = saver.save(sess, str(tmp_path / "m"))
    old, old_state = _snapshot(path), open(tmp_path / "checkpoint").read()
    vs[0].load(np.float32([9, 9, 9, 9]), session=sess)

    def crash(src, dst):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        saver.save(sess, path)
    with pytest.raises(OSError, match="disk full"):
        saver.save(sess, str(tmp_path / "m"), global_step=1)
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == _files(fmt, "m")  # no temporary or half-written files
    assert _snapshot(path) == old and open(tmp_path / "checkpoint").read() == old_state

    real_write = saver_lib.atomic_write
    calls = []

    def fail_on_state_file(p, data):  # the checkpoint is written, the state file is not
        calls.append(p)
        if p.endswith("checkpoint"):
            raise OSError("no space for the state file")
        real_write(p, data)
    monkeypatch.setattr(saver_lib, "atomic_write", fail_on_state_file)
    with pytest.raises(OSError, match="state file"):
        saver.save(sess, str(tmp_path / "m"), global_step=2)
    assert latest_checkpoint(str(tmp_path)) == path  # still names a complete checkpoint


def test_max_to_keep_and_latest_checkpoint(tmp_path, fmt):
    g, vs = _graph()
    sess = _session(g)
    assert latest_checkpoint(str(tmp_path)) is None
    saver = _saver(g, max_to_keep=2)
    paths = [saver.save(sess, str(tmp_path / "m"), global_step=i) for i in range(5)]
    assert sorted(os.listdir(tmp_path)) == _files(fmt, "m-3", "m-4")
    assert saver.last_checkpoints == paths[-2:]
    assert latest_checkpoint(str(tmp_path)) == paths[-1]
    state = get_checkpoint_state(str(tmp_path))
    assert list(state.all_model_checkpoint_paths) == paths[-2:]
    text = open(tmp_path / "checkpoint").read()
    assert text == 'model_checkpoint_path: "m-4"\nall_model_checkpoint_paths: "m-3"\n' \
                   'all_model_checkpoint_paths: "m-4"\n'  # TensorFlow's text format, relative paths
    saver.save(sess, paths[-2])  # saving to a kept path again makes it the newest
    assert saver.last_checkpoints == [paths[-1], paths[-2]]

    moved = tmp_path.parent / (tmp_path.name + "_moved")
    shutil.copytree(tmp_path, moved)
    assert latest_checkpoint(str(moved)) == str(moved / "m-3")

    resumed = _saver(g, max_to_keep=2)  # a new run adopts the old checkpoints so that they are rotated too
    resumed.recover_last_checkpoints(list(get_checkpoint_state(str(moved)).all_model_checkpoint_paths))
    resumed.save(sess, str(moved / "m"), global_step=9)
    assert sorted(os.listdir(moved)) == _files(fmt, "m-3", "m-9")

    keep_all = _saver(g, max_to_keep=None)
    for i in range(3):
        keep_all.save(sess, str(tmp_path / "all" / "k"), global_step=i)
    assert len(get_checkpoint_state(str(tmp_path / "all")).all_model_checkpoint_paths) == 3


def test_broken_state_file(tmp_path):
    (tmp_path / "checkpoint").write_text("model_checkpoint_path: \"unterminated\n")
    with pytest.raises(tf.errors.DataLossError, match="checkpoint state file .* is corrupted"):
        latest_checkpoint(str(tmp_path))
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "gone"\n')
    with pytest.raises(tf.errors.NotFoundError, match="names .*gone.*which does not exist"):
        latest_checkpoint(str(tmp_path))


# -- a hostile state file: nothing outside the folder is deleted or read --------------------------------------
def _hostile_folder(tmp_path, entries):
    """A run folder holding two real checkpoints, m-1 and m-2, whose state file also lists `entries` (oldest
    first, so that max_to_keep drops them first); and a Saver that adopts the folder's checkpoints the way
    `tfplus train --resume` does."""
    g, vs = _graph()
    sess = _session(g)
    run = tmp_path / "run"
    writer = _saver(g)
    for i in (1, 2):
        writer.save(sess, str(run / "m"), global_step=i)
    lines = [f'all_model_checkpoint_paths: "{e}"' for e in [*entries, "m-1", "m-2"]]
    (run / "checkpoint").write_text('model_checkpoint_path: "m-2"\n' + "\n".join(lines) + "\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state = get_checkpoint_state(str(run))
    resumed = _saver(g, max_to_keep=1)
    resumed.recover_last_checkpoints(list(state.all_model_checkpoint_paths))
    return run, sess, resumed, state, [str(w.message) for w in caught]


def _victim(tmp_path, name="victim", checkpoint=True):
    """A file outside the run folder: a tfplus checkpoint of another run (or plain text)."""
    path = tmp_path / "elsewhere" / name
    path.parent.mkdir(exist_ok=True)
    g, _ = _graph()
    if checkpoint:
        _saver(g).save(_session(g), str(path), write_state=False)
    else:
        path.write_text("precious")
    return path


@pytest.mark.parametrize("how", ["absolute", "dotdot"])
def test_state_file_cannot_delete_outside_its_folder(tmp_path, how, fmt):
    victim = _victim(tmp_path)
    entry = str(victim) if how == "absolute" else "../elsewhere/victim"
    run, sess, resumed, state, warned = _hostile_folder(tmp_path, [entry])
    resumed.save(sess, str(run / "m"), global_step=3)
    assert _exists(victim) and sorted(os.listdir(run)) == _files(fmt, "m-3")
    assert list(state.all_model_checkpoint_paths) == [str(run / "m-1"), str(run / "m-2")]
    assert warned == [f"checkpoint state file {str(run / 'checkpoint')!r}: ignoring {entry!r}, which lies "
                      "outside the folder (a state file may only name checkpoint files in its own folder)"]


def test_state_file_cannot_delete_through_a_symlink(tmp_path):
    victim = _victim(tmp_path)
    link_dir = tmp_path / "run" / "linkdir"
    link_dir.parent.mkdir()
    os.symlink(victim.parent, link_dir)
    run, sess, resumed, state, warned = _hostile_folder(tmp_path, ["linkdir/victim"])
    resumed.save(sess, str(run / "m"), global_step=3)
    assert _exists(victim)
    assert len(warned) == 1 and "ignoring 'linkdir/victim', which lies outside the folder" in warned[0]
    # The newest checkpoint is read, so a link out of the folder there is an error, not a restore from elsewhere.
    os.symlink(victim, run / "link")
    (run / "checkpoint").write_text('model_checkpoint_path: "link"\n')
    with pytest.raises(tf.errors.DataLossError, match="names 'link', which lies outside the folder"):
        latest_checkpoint(str(run))
    (run / "checkpoint").write_text(f'model_checkpoint_path: "{victim}"\n')
    with pytest.raises(tf.errors.DataLossError, match="lies outside the folder"):
        latest_checkpoint(str(run))


def test_state_file_listing_a_folder_or_foreign_files_deletes_nothing(tmp_path, fmt):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "adir").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("mine")
    run, sess, resumed, state, warned = _hostile_folder(tmp_path, ["adir", "notes.txt"])
    resumed.save(sess, str(run / "m"), global_step=3)  # the old code crashed here (IsADirectoryError)
    assert sorted(os.listdir(run)) == sorted(["adir", "notes.txt", *_files(fmt, "m-3")])
    assert (run / "notes.txt").read_text() == "mine"
    assert list(state.all_model_checkpoint_paths) == [str(run / p) for p in ("notes.txt", "m-1", "m-2")]
    assert len(warned) == 1 and "ignoring 'adir', which is a folder" in warned[0]
    (run / "checkpoint").write_text('model_checkpoint_path: "adir"\n')
    with pytest.raises(tf.errors.DataLossError, match="names 'adir', which is a folder"):
        latest_checkpoint(str(run))


def test_saver_deletes_only_checkpoints_it_wrote_or_in_its_folder(tmp_path):
    """recover_last_checkpoints given paths elsewhere (here a tfplus checkpoint of another run) adopts them for
    the state file's history only: rotation leaves files outside the folder it saves to alone."""
    victim = _victim(tmp_path)
    g, _ = _graph()
    sess = _session(g)
    saver = _saver(g, max_to_keep=1)
    saver.recover_last_checkpoints([str(victim)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        saver.save(sess, str(tmp_path / "run" / "m"), global_step=1)
    assert _exists(victim)
    assert [str(w.message) for w in caught] == [f"Saver: not deleting {str(victim)!r}: it is not a tfplus "
                                                "checkpoint that this Saver wrote or that lies in "
                                                f"{str(tmp_path / 'run')!r}"]
    assert (tmp_path / "run" / "checkpoint").read_text().count("victim") == 0
    other = saver.save(sess, str(tmp_path / "other" / "m"), global_step=2)  # written by this Saver: rotated
    saver.save(sess, str(tmp_path / "run" / "m"), global_step=3)
    assert not _exists(other) and not _exists(tmp_path / "run" / "m-1")


def _crafted(path, *tensors):
    """A checkpoint file with a valid checksum holding the given (name, TensorProto) entries."""
    ckpt = checkpoint_pb2.Checkpoint()
    for name, t in tensors:
        ckpt.tensors.add(name=name, tensor=t)
    payload = ckpt.SerializeToString()
    path.write_bytes(saver_lib.MAGIC + hashlib.sha256(payload).digest() + payload)
    return str(path)


@pytest.mark.parametrize("dims,content,dtype", [
    ([10**8], b"", tf.float32.as_datatype_enum),         # a few bytes declaring 400 MB
    ([10**6, 10**6], b"", tf.float32.as_datatype_enum),  # 4 TB
    ([2], b"\0" * 7, tf.float32.as_datatype_enum),       # one byte short
    ([-7], b"", tf.float32.as_datatype_enum),
    ([2], b"\0" * 8, 7),                                  # DT_STRING
    ([2], b"\0" * 8, 999),
])
def test_entry_declaring_more_than_it_holds_is_refused_before_allocating(tmp_path, dims, content, dtype):
    t = tensor_pb2.TensorProto(dtype=dtype, tensor_content=content)
    for d in dims:
        t.tensor_shape.dim.add(size=d)
    path = _crafted(tmp_path / "m", ("w", t))
    tracemalloc.start()
    try:
        with pytest.raises(tf.errors.DataLossError, match="cannot be decoded: entry 'w' "):
            list_variables(path)
        assert tracemalloc.get_traced_memory()[1] < 10**6
    finally:
        tracemalloc.stop()
    t = tensor_pb2.TensorProto(dtype=tf.float32.as_datatype_enum, float_val=[1.0])
    t.tensor_shape.dim.add(size=10**8)  # typed values: not what a Saver writes, refused as well
    with pytest.raises(tf.errors.DataLossError, match="holds 0 bytes of content"):
        list_variables(_crafted(tmp_path / "m2", ("w", t)))
    t.tensor_shape.unknown_rank = True
    with pytest.raises(tf.errors.DataLossError, match="unknown shape"):
        list_variables(_crafted(tmp_path / "m3", ("w", t)))


def test_tensorflows_saver_arguments(tmp_path, fmt):
    g, vs = _graph()
    sess = _session(g)
    saver = _saver(g, pad_step_number=True, sharded=True, save_relative_paths=True)
    path = saver.save(sess, str(tmp_path / "m"), 100, None, "meta", False)  # TF's positional order
    assert path == str(tmp_path / "m-00000100") and latest_checkpoint(str(tmp_path)) == path
    assert sorted(os.listdir(tmp_path)) == _files(fmt, "m-00000100", meta=False)  # write_meta_graph=False
    with pytest.warns(UserWarning, match="keep_checkpoint_every_n_hours is not implemented"):
        _saver(g, keep_checkpoint_every_n_hours=2)
    with pytest.raises(ValueError, match="V2 checkpoints only"):
        _saver(g, write_version=1)
    with pytest.raises(NotImplementedError, match="reshape=True"):
        _saver(g, reshape=True)
    with tf.Graph().as_default() as empty:
        nothing = Saver(allow_empty=True)
    with tf.Session(graph=empty) as s:
        assert nothing.save(s, str(tmp_path / "e")) is None and not _exists(tmp_path / "e")
        nothing.restore(s, path)


def test_a_run_folder_continues_in_the_other_format(tmp_path, fmt):
    """A folder of checkpoints in one format (e.g. an existing user's, in tfplus's earlier format) resumes in the
    other: the old checkpoints restore and are rotated like the new ones."""
    other = next(f for f in saver_lib.FORMATS if f != fmt)
    g, vs = _graph()
    sess = _session(g)
    with g.as_default():
        old = saver_lib.Saver(format=other)
        new = Saver(max_to_keep=2)
    first, second = (old.save(sess, str(tmp_path / "m"), global_step=i) for i in (1, 2))
    new.recover_last_checkpoints(list(get_checkpoint_state(str(tmp_path)).all_model_checkpoint_paths))
    new.restore(sess, latest_checkpoint(str(tmp_path)))
    third = new.save(sess, str(tmp_path / "m"), global_step=3)
    assert sorted(os.listdir(tmp_path)) == sorted(set(_files(other, "m-2")) | set(_files(fmt, "m-3")))
    assert latest_checkpoint(str(tmp_path)) == third and new.last_checkpoints == [second, third]
    new.restore(sess, second)
    assert list_variables(second) == list_variables(third)


def test_meta_graph_as_text_and_a_damaged_meta_file(tmp_path):
    """export_meta_graph(as_text=True) imports like the binary one; a file that is neither raises DataLossError
    naming it; a collection of Python objects is left out with a warning."""
    with tf.Graph().as_default():
        w = tf.Variable([1.0, 2.0], name="w")
        tf.add_to_collection("objects", object())
        tf.add_to_collection("sizes", 3)
        saver = Saver()
        with tf.Session() as sess:
            sess.run(w.initializer)
            path = saver.save(sess, str(tmp_path / "m"), write_meta_graph=False)
        meta = saver.export_meta_graph(str(tmp_path / "m.pbtxt"), as_text=True)
    assert "objects" not in meta.collection_def and list(meta.collection_def["sizes"].int64_list.value) == [3]
    with tf.Graph().as_default():
        restored = tf.train.import_meta_graph(str(tmp_path / "m.pbtxt"))
        assert tf.get_collection("sizes") == [3] and [v.name for v in tf.trainable_variables()] == ["w:0"]
        with tf.Session() as sess:
            restored.restore(sess, path)
            assert sess.run("w:0").tolist() == [1.0, 2.0]
    (tmp_path / "bad.meta").write_bytes(b"\xff\x00not a proto")
    with pytest.raises(tf.errors.DataLossError, match="bad.meta.* is not a MetaGraphDef"):
        tf.train.import_meta_graph(str(tmp_path / "bad.meta"))
