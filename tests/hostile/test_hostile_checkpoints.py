"""Hostile checkpoint folders: truncated, random and bit-flipped checkpoint files, crafted metadata and crafted
`checkpoint` state files each get a clear error of tfplus's own (never a raw traceback, never silent
acceptance); nothing outside the folder is deleted and no finite checkpoint is lost. And a real kill -9 of
`tfplus train` followed by --resume.

Seeded: every run feeds the same inputs.
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import pytest

import tfplus as tf
from tfplus import finetune, tensor_bundle, trainer
from tfplus.cli import main
from tfplus.data import TrainBatches
from tfplus.proto import checkpoint_pb2
from tfplus.train import saver as saver_lib

SMALL = ["--synthetic", "--model", "lenet", "--batch-size", "16"]
# A synthetic set of 64 training / 32 test images: 4 steps an epoch at batch 16 (as trainer globals, so that
# a subprocess can set them too).
TINY = {"SYNTHETIC_TRAIN": 64, "SYNTHETIC_TEST": 32}


@pytest.fixture
def tiny_set(monkeypatch):
    for k, v in TINY.items():
        monkeypatch.setattr(trainer, k, v)


def _sha(path) -> str:
    """The hash of a checkpoint's files (either format)."""
    h = hashlib.sha256()
    for f in saver_lib._checkpoint_files(str(path)):
        h.update(open(f, "rb").read())
    return h.hexdigest()


# -- checkpoint files of tfplus's one-file format: the Saver's reader (TensorFlow's format: test_tensor_bundle) --
def _graph():
    g = tf.Graph()
    with g.as_default():
        w = tf.Variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="w")
        b = tf.Variable(np.int32([7, 8]), name="b")
        tf.global_variables_initializer()
    return g, (w, b)


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A small valid checkpoint's bytes, and a session whose variables hold other values."""
    g, (w, b) = _graph()
    sess = tf.Session(graph=g)
    sess.run("init")
    with g.as_default():
        saver = tf.train.Saver(format="tfplus")
    path = saver.save(sess, str(tmp_path_factory.mktemp("good") / "m"), metadata={"step": 3})
    w.load(np.zeros((2, 3), np.float32), session=sess)
    return open(path, "rb").read(), sess, saver


def _refused(data: bytes, tmp_path, good) -> str:
    """Writes `data` as a checkpoint: restoring it must raise an error of tfplus's own and leave the session's
    variables as they were, and the other readers raise such an error or return. Returns the restore's
    message."""
    _, sess, saver = good
    path = str(tmp_path / "hostile")
    with open(path, "wb") as f:
        f.write(data)
    for read in (tf.train.list_variables, saver_lib.read_checkpoint_metadata):
        try:
            read(path)
        except tf.errors.OpError:
            pass
    before = sess.variable_value("w").tobytes()
    with pytest.raises(tf.errors.OpError) as info:
        saver.restore(sess, path)
    assert sess.variable_value("w").tobytes() == before
    return str(info.value)


def test_truncated_checkpoints(good, tmp_path):
    data = good[0]
    for n in sorted({0, 1, 7, 8, 9, 39, 40, 41, len(data) // 2, len(data) - 1, *range(0, len(data), 13)}):
        _refused(data[:n], tmp_path, good)


def test_random_files(tmp_path, good):
    rng = random.Random(0)
    for n in (0, 5, 40, 41, 100, 1000):
        for prefix in (b"", saver_lib.MAGIC):
            _refused(prefix + rng.randbytes(n), tmp_path, good)


def test_every_bit_flip_is_caught(good, tmp_path):
    data = good[0]
    rng = random.Random(1)
    for bit in sorted(rng.sample(range(8 * len(data)), 300)):
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << bit % 8
        _refused(bytes(flipped), tmp_path, good)


def _signed(payload: bytes) -> bytes:
    """A payload with its valid header: what someone crafting a file can always produce."""
    return saver_lib.MAGIC + hashlib.sha256(payload).digest() + payload


def _payload(*entries, meta_json="") -> bytes:
    ckpt = checkpoint_pb2.Checkpoint(meta_json=meta_json)
    for name, dtype, dims, content in entries:
        t = ckpt.tensors.add(name=name).tensor
        t.dtype, t.tensor_content = dtype, content
        for d in dims:
            t.tensor_shape.dim.add(size=d)
    return ckpt.SerializeToString()


F32, I32 = tf.float32.as_datatype_enum, tf.int32.as_datatype_enum
W = ("w", F32, [2, 3], np.ones((2, 3), np.float32).tobytes())
B = ("b", I32, [2], np.int32([1, 2]).tobytes())


@pytest.mark.parametrize("payload,message", [
    (_payload(W), "key 'b' not found"),
    (_payload(W, B, W), "an entry name appears twice"),
    (_payload(("w", F32, [3, 2], W[3]), B), "with shape (3, 2)"),
    (_payload(("w", I32, [2, 3], W[3]), B), "as int32"),
    (_payload(("w", F32, [2, 3], b""), B), "holds 0 bytes"),
    (_payload(("w", F32, [2**40, 2**40], b""), B), "holds 0 bytes"),
    (_payload(("w", 7, [2, 3], W[3]), B), "dtype enum 7"),
    (_payload(("w", F32, [-1, 3], W[3]), B), "unknown shape"),
    (_payload(), "key 'w' not found"),
    (b"\xff" * 50, "cannot be decoded"),
    (_payload(W, B, meta_json="[" * 50_000), "nested too deeply"),
], ids=range(11))
def test_crafted_payloads_with_a_valid_checksum(payload, message, good, tmp_path):
    assert message in _refused(_signed(payload), tmp_path, good)


# -- crafted metadata through the CLI: eval and train --resume ------------------------------------------------
class _WouldTrain(Exception):
    """Raised by the first training batch of a resume: everything before it accepted the checkpoint."""


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A 6-step run's checkpoint folder on the tiny set; its checkpoints at steps 4 and 6."""
    folder = tmp_path_factory.mktemp("finished") / "ckpt"
    with pytest.MonkeyPatch.context() as mp:
        for k, v in TINY.items():
            mp.setattr(trainer, k, v)
        assert main(["train", *SMALL, "--steps", "6", "--checkpoint-dir", str(folder)]) == 0
    return folder


def _leaves(obj, path=()):
    """Every (path, value) in a JSON object, containers included."""
    yield path, obj
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        yield from _leaves(v, (*path, k))


ODD_VALUES = [None, -1, 0, 2**70, 1.5, -0.0, float("nan"), float("inf"), "", "x" * 300, True, [], {}, [[]],
              {"a": 1}, [1, 2, 3]]


def _mutations(meta, rng, n):
    """n metadata variants: a value replaced by an odd one, or a key deleted, anywhere in the tree."""
    spots = [p for p, _ in _leaves(meta) if p]
    for _ in range(n):
        m = copy.deepcopy(meta)
        where = rng.choice(spots)
        parent = m
        for k in where[:-1]:
            parent = parent[k]
        if isinstance(parent, dict) and rng.random() < 0.25:
            del parent[where[-1]]
        else:
            parent[where[-1]] = copy.deepcopy(rng.choice(ODD_VALUES))
        yield m


def _run_hostile(argv, monkeypatch, capsys) -> tuple[int | None, str]:
    """Runs the CLI: (exit code, its stderr's last line); exit code None when a resume got as far as training."""
    def refuse_to_train(self):
        raise _WouldTrain
    monkeypatch.setattr(TrainBatches, "__next__", refuse_to_train)
    try:
        code = main(argv)
    except _WouldTrain:
        code = None
    lines = capsys.readouterr().err.strip().splitlines()
    return code, lines[-1] if lines else ""


def test_fuzzed_metadata_gets_a_clear_error_or_is_harmless(finished, tiny_set, tmp_path, monkeypatch, capsys):
    folder = tmp_path / "ckpt"
    shutil.copytree(finished, folder)
    path = tf.train.latest_checkpoint(str(folder))
    older = str(folder / "model.ckpt-4")
    older_sha = _sha(older)
    meta = tf.train.read_checkpoint_metadata(path)
    reader = tensor_bundle.BundleReader(path)  # the trainer writes TensorFlow's format
    tensors = {k: reader.read(k) for k in reader.keys()}
    outcomes = {}
    for m in _mutations(meta, random.Random(2), 15):
        tensors[saver_lib.METADATA_KEY] = np.array(json.dumps(m).encode(), dtype=object)
        tensor_bundle.write_bundle(path, tensors)  # valid checksums: what a crafted file can do
        for command in (["eval", "--checkpoint", str(folder)], ["train", "--checkpoint-dir", str(folder),
                                                                  "--resume"]):
            code, last = _run_hostile(command, monkeypatch, capsys)
            outcomes[code] = outcomes.get(code, 0) + 1
            if code not in (0, None):
                assert code in (1, 2) and last.startswith(f"tfplus {command[0]}: error: "), (m, last)
        assert _sha(older) == older_sha  # the earlier, finite checkpoint is never touched
    assert outcomes.get(2, 0) > 15  # most variants are refused (the others change nothing that matters)


# -- crafted state files --------------------------------------------------------------------------------------
HOSTILE_ENTRIES = ["/etc/passwd", "{victim}", "../victim", "../../victim", "./../victim", "sub/../../victim",
                   "linkdir/victim", "link", ".", "", "adir", "adir/", "notes.txt", "m-1/..", "m-1\\x00x",
                   "\\xff\\xfe", "a" * 5000, "missing"]


def _hostile_state_folder(tmp_path, entries, latest="m-2"):
    """A run folder with checkpoints m-1, m-2, a folder, a foreign file, a link out and a linked folder out,
    whose state file lists `entries`; and a victim file outside."""
    victim = tmp_path / "victim"
    victim.write_text("precious")
    run = tmp_path / "run" / "deeper"
    g, _ = _graph()
    sess = tf.Session(graph=g)
    sess.run("init")
    with g.as_default():
        writer = tf.train.Saver()
    for i in (1, 2):
        writer.save(sess, str(run / "m"), global_step=i)
    (run / "adir").mkdir()
    (run / "notes.txt").write_text("mine")
    os.symlink(victim, run / "link")
    os.symlink(tmp_path, run / "linkdir")
    lines = [f'model_checkpoint_path: "{latest}"'] + [f'all_model_checkpoint_paths: "{e}"' for e in entries]
    (run / "checkpoint").write_text("\n".join(lines).replace("{victim}", str(victim)) + "\n")
    return run, victim, g, sess


@pytest.mark.parametrize("seed", range(4))
def test_fuzzed_state_files_delete_nothing_outside_and_no_good_checkpoint(seed, tmp_path):
    rng = random.Random(seed)
    entries = rng.sample(HOSTILE_ENTRIES, 8) + ["m-1", "m-2"]
    rng.shuffle(entries)
    run, victim, g, sess = _hostile_state_folder(tmp_path, entries)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            kept = list(tf.train.get_checkpoint_state(str(run)).all_model_checkpoint_paths)
        except tf.errors.DataLossError:  # e.g. bytes that are not UTF-8: the whole file is refused
            kept = []
        root = os.path.realpath(run)
        for p in kept:  # what is left names only things inside the folder
            assert os.path.commonpath([root, os.path.realpath(p)]) == root and not os.path.isdir(p)
        with g.as_default():
            resumed = tf.train.Saver(max_to_keep=1)
        resumed.recover_last_checkpoints(kept)
        for step in (3, 4):
            resumed.save(sess, str(run / "m"), global_step=step)
    assert victim.read_text() == "precious" and os.path.islink(run / "link")
    assert (run / "notes.txt").read_text() == "mine" and (run / "adir").is_dir()
    assert tf.train.latest_checkpoint(str(run)) == str(run / "m-4")


@pytest.mark.parametrize("latest,message", [
    ("{victim}", "lies outside the folder"), ("../victim", "lies outside the folder"),
    ("link", "lies outside the folder"), ("linkdir/victim", "lies outside the folder"),
    ("adir", "is a folder"), (".", "is a folder"), ("", "names no checkpoint"),
    ("missing", "does not exist"), ("notes.txt", "is not a tfplus checkpoint"),
])
def test_a_hostile_newest_checkpoint_is_a_clear_error_in_the_cli(latest, message, tmp_path, capsys):
    """A state file that cannot be trusted is an error; a newest checkpoint that is not whole is skipped, saying
    why, for the next one listed (here m-1, which is no `tfplus train` checkpoint: an error of its own)."""
    run, victim, _, _ = _hostile_state_folder(tmp_path, ["m-1"], latest=latest.replace("{victim}",
                                                                                         str(tmp_path / "victim")))
    shas = {p: _sha(run / p) for p in ("m-1", "m-2")}
    for argv in (["eval", "--checkpoint", str(run)], ["train", *SMALL, "--checkpoint-dir", str(run),
                                                      "--resume"]):
        assert main(argv) in (1, 2)
        lines = capsys.readouterr().err.strip().splitlines()
        assert lines[-1].startswith(f"tfplus {argv[0]}: error: ")
        if latest in ("missing", "notes.txt"):
            assert lines[0].startswith(f"skipped checkpoint {run / latest}: ") and message in lines[0]
            assert len(lines) == 2 and "m-1: not a checkpoint of `tfplus train`" in lines[1]
        else:
            assert message in lines[0] and len(lines) == 1
    assert victim.read_text() == "precious" and {p: _sha(run / p) for p in shas} == shas


# -- kill -9 and resume -----------------------------------------------------------------------------------------
def _step_losses(log) -> dict[int, float]:
    """{step: loss} of a log's complete step rows (a killed process may have left half a line)."""
    rows = []
    for line in open(log) if os.path.exists(log) else ():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return {r["step"]: r["loss"] for r in rows if r["kind"] == "step"}


def test_kill_9_then_resume(tiny_set, tmp_path):
    """A real SIGKILL from outside, at whatever the run is doing once it has logged 4 steps (checkpoints every
    step, so possibly mid-write): --resume continues from the newest checkpoint and ends with the losses of an
    uninterrupted run."""
    argv = ["train", *SMALL, "--steps", "12", "--no-eval", "--log-every", "1"]
    assert main([*argv, "--log", str(tmp_path / "reference.jsonl")]) == 0
    ckpt, log = tmp_path / "ckpt", tmp_path / "log.jsonl"
    argv += ["--checkpoint-dir", str(ckpt), "--checkpoint-every", "1"]
    script = ("import sys\nfrom tfplus import trainer\nfrom tfplus.cli import main\n"
              + "".join(f"trainer.{k} = {v}\n" for k, v in TINY.items()) + "sys.exit(main(sys.argv[1:]))\n")
    proc = subprocess.Popen([sys.executable, "-c", script, *argv, "--log", str(log)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while len(_step_losses(log)) < 4 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, "the run ended before it was killed"
    killed = _step_losses(log)
    newest = tf.train.latest_checkpoint(str(ckpt))
    step = int(newest.rsplit("-", 1)[1])
    assert 1 <= step <= max(killed) < 12

    assert main([*argv, "--resume", "--log", str(tmp_path / "resumed.jsonl")]) == 0
    want, resumed = _step_losses(tmp_path / "reference.jsonl"), _step_losses(tmp_path / "resumed.jsonl")
    assert sorted(resumed) == list(range(step + 1, 13))
    assert resumed == {s: want[s] for s in resumed} and killed == {s: want[s] for s in killed}
    assert not [n for n in os.listdir(ckpt) if n.endswith(".tmp")]  # a write killed midway was cleaned up


# -- hostile files in a checkpoint folder: FIFOs, devices, huge or crafted indexes (each read in a child process
# with a time and memory limit, so that a regression fails the test instead of hanging or swapping the suite) --
def _hostile_folder(root, case: str) -> str:
    """A folder with a good checkpoint m-1 (w: 3 floats), then made hostile per `case`."""
    folder = root / case
    g = tf.Graph()
    with g.as_default():
        tf.Variable(np.float32([1, 2, 3]), name="w")
        tf.global_variables_initializer()
        saver = tf.train.Saver()
    sess = tf.Session(graph=g)
    sess.run("init")
    prefix = saver.save(sess, str(folder / "m"), global_step=1, metadata={"c": 1})
    target = {"state": folder / "checkpoint", "index": tensor_bundle.index_path(prefix),
              "data": tensor_bundle.data_path(prefix)}
    what, _, which = case.partition("-")
    if what in ("fifo", "zero", "dir"):
        os.remove(target[which])
        {"fifo": os.mkfifo, "zero": lambda p: os.symlink("/dev/zero", p), "dir": os.mkdir}[what](target[which])
    elif what == "sparse":  # 6 GB of nothing, as the index
        with open(target["index"], "r+b") as f:
            f.truncate(6 << 30)
    elif what == "bomb":  # 120 MB of keys sharing a 4 KB prefix, in a 450 KB index
        entry = tensor_bundle.BundleReader(prefix).entries["w"].SerializeToString()
        header = tensor_bundle.tensor_bundle_pb2.BundleHeaderProto(num_shards=1).SerializeToString()
        keys = [b"w" * 4096 + i.to_bytes(3, "big") for i in range(30000)]
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(tensor_bundle, "_RESTART_INTERVAL", 1 << 30)  # every key shares all it can
            table = tensor_bundle._table_bytes([(b"", header), *((k, entry) for k in keys)])
        open(target["index"], "wb").write(table)
    elif what == "huge":  # an entry declaring 2**34 floats (64 GB) in a data file of 12 bytes
        reader = tensor_bundle.BundleReader(prefix)
        entry = reader.entries["w"]
        entry.shape.dim[0].size, entry.size = 2**34, 2**36
        tensor_bundle._write_index(prefix, dict(reader.entries), 1)
    elif what == "dtype":  # the metadata tensor as a float, not a JSON string
        tensor_bundle.write_bundle(prefix, {"w": np.float32([1, 2, 3]), saver_lib.METADATA_KEY: np.float32(7)})
    return str(folder)


HOSTILE_FILES = {  # case: what the refusal says
    "fifo-state": "is a FIFO", "zero-state": "is a character device", "dir-state": "is a folder",
    "fifo-index": "is a FIFO", "zero-index": "lies outside the folder", "dir-index": "is a folder",
    "fifo-data": "is a FIFO", "zero-data": "lies outside the folder",
    "sparse-index": "has 6442450944 bytes", "bomb-index": "keys decode to more than",
    "huge-data": "spans bytes [13, 68719476749) of", "dtype-meta": "is a float32 tensor",
}

MAY_RETURN = {  # by case, else by the kind of file: the readers that do not read it
    "state": ("NewCheckpointReader", "read_checkpoint_metadata", "Saver.restore"),
    "index": ("latest_checkpoint",), "data": ("latest_checkpoint",),
    "huge-data": ("latest_checkpoint", "read_checkpoint_metadata"),
    "dtype-meta": ("latest_checkpoint", "Saver.restore", "newest_valid_checkpoint", "MonitoredTrainingSession"),
}

_READERS = r'''
import contextlib, io, json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))  # a read without bound fails instead of swapping
import numpy as np
import tfplus as tf
from tfplus.cli import main

def restore(folder, direct):
    g = tf.Graph()
    with g.as_default():
        tf.Variable(np.zeros(3, np.float32), name="w")
        tf.train.get_or_create_global_step()
        saver = tf.train.Saver(var_list=[v for v in tf.global_variables() if v.op.name == "w"])
    sess = tf.Session(graph=g)
    saver.restore(sess, direct)

def monitored(folder):
    with tf.Graph().as_default():
        tf.Variable(np.zeros(3, np.float32), name="w")
        tf.train.get_or_create_global_step()
        with tf.train.MonitoredTrainingSession(checkpoint_dir=folder, save_checkpoint_secs=None,
                                               save_summaries_steps=None, log_step_count_steps=None):
            pass

def newest(folder):
    reader, skipped = tf.train.newest_valid_checkpoint(folder)
    if reader is None:
        raise tf.errors.DataLossError(None, None, " / ".join(why for _, why in skipped))
    return reader.path

def everything(reader):
    return [reader.get_tensor(k) for k in reader.get_variable_to_shape_map()], reader.metadata()

def cli(folder):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["eval", "--checkpoint", folder])
    lines = err.getvalue().strip().splitlines()
    if code in (1, 2) and lines and lines[-1].startswith("tfplus eval: error: ") and len(lines) <= 2:
        raise tf.errors.DataLossError(None, None, " / ".join(lines))
    raise AssertionError(f"eval: exit {code}, {lines}")

for folder in sys.argv[1:]:
    direct = folder + "/m-1"
    readers = {
        "latest_checkpoint": lambda: tf.train.latest_checkpoint(folder),
        "NewCheckpointReader": lambda: everything(tf.train.NewCheckpointReader(direct)),
        "load_checkpoint": lambda: everything(tf.train.load_checkpoint(folder)),
        "read_checkpoint_metadata": lambda: tf.train.read_checkpoint_metadata(direct),
        "Saver.restore": lambda: restore(folder, direct),
        "newest_valid_checkpoint": lambda: newest(folder),
        "MonitoredTrainingSession": lambda: monitored(folder),
        "tfplus eval": lambda: cli(folder),
    }
    for name, read in readers.items():
        try:
            out = read()
            result = ["returned", repr(out)[:200]]
        except tf.errors.OpError as e:
            result = [type(e).__name__, str(e)]
        except BaseException as e:
            result = ["raw " + type(e).__name__, str(e)[:300]]
        print(json.dumps([folder, name, *result]), flush=True)
'''


def test_hostile_files_are_refused_by_every_reader_without_hanging_or_allocating(tmp_path):
    folders = {case: _hostile_folder(tmp_path, case) for case in HOSTILE_FILES}
    proc = subprocess.run([sys.executable, "-c", _READERS, *folders.values()], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(results) == 8 * len(folders), proc.stderr[-2000:]
    by_case = {v: k for k, v in folders.items()}
    for folder, reader, outcome, message in results:
        case = by_case[folder]
        assert not outcome.startswith("raw "), (case, reader, outcome, message)
        if outcome == "returned":  # only what never reads the hostile file (or entry) may succeed
            allowed = MAY_RETURN[case] if case in MAY_RETURN else MAY_RETURN[case.rpartition("-")[2]]
            assert reader in allowed, (case, reader, message)
    refusals = {(by_case[f], r): m for f, r, o, m in results if o != "returned"}
    for case, says in HOSTILE_FILES.items():
        assert any(says in m for (c, _), m in refusals.items() if c == case), (case, says, refusals)


def test_a_200k_entry_index_loads_in_linear_time(tmp_path):
    """A legitimate big index (200k tensors): opened, listed and looked up in one pass each (it took 38 s)."""
    entry = tensor_bundle.tensor_bundle_pb2.BundleEntryProto(
        dtype=1, shape=tensor_bundle.shape_to_proto((0,)), crc32c=tensor_bundle.crc32c.mask(0)).SerializeToString()
    header = tensor_bundle.tensor_bundle_pb2.BundleHeaderProto(num_shards=1).SerializeToString()
    keys = [f"layer{i:06d}/w" for i in range(200_000)]
    prefix = str(tmp_path / "big")
    open(tensor_bundle.index_path(prefix), "wb").write(
        tensor_bundle._table_bytes([(b"", header), *((k.encode(), entry) for k in keys)]))
    open(tensor_bundle.data_path(prefix), "wb").close()
    done = {}

    def work():
        reader = tf.train.NewCheckpointReader(prefix)
        done["listed"] = len(reader.get_variable_to_shape_map())
        done["found"] = sum(map(reader.has_tensor, keys))
        done["read"] = sum(reader.get_tensor(k).size == 0 for k in keys[::100])
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(60)  # generous: the work is linear (a few seconds); quadratic work would take hours
    assert done == {"listed": 200_000, "found": 200_000, "read": 2000}


REDOS = "^((([a-z0-9_/]+)+)+)+!"  # 4 s on one of lenet's 10 names (13 letters) before check_pattern


@pytest.mark.parametrize("pattern,safe", [
    ("^(fc3|logits)/", True), ("conv.*/weights", True), ("fc[12]/.*", True), ("([a-z]|_)+", True),
    ("(a+)+$", False), ("(ab|a)*$", False), ("(?:x{2,3})+", False), ("a*b*c*d*", False), (r"(\w)\1", False),
    ("x" * 300, False), ("(", False), (REDOS, False),
])
def test_trainable_patterns_are_checked_before_they_are_matched(pattern, safe):
    if safe:
        finetune.check_pattern(pattern)
    else:
        with pytest.raises(ValueError, match="^--trainable "):
            finetune.check_pattern(pattern)


def test_a_redos_pattern_in_a_checkpoints_recipe_or_the_flag_is_refused(finished, tmp_path):
    """recipe.trainable (and --trainable) is a regex matched against every variable name: one that backtracks
    exponentially is refused before it is matched (in a child process: a regression hangs it, not the suite)."""
    folder = tmp_path / "ckpt"
    shutil.copytree(finished, folder)
    path = tf.train.latest_checkpoint(str(folder))
    reader = tensor_bundle.BundleReader(path)
    tensors = {k: reader.read(k) for k in reader.keys()}
    meta = json.loads(tensors[saver_lib.METADATA_KEY].item())
    meta["recipe"]["trainable"] = REDOS
    tensors[saver_lib.METADATA_KEY] = np.array(json.dumps(meta).encode(), dtype=object)
    tensor_bundle.write_bundle(path, tensors)
    script = ("import sys\nfrom tfplus import trainer\nfrom tfplus.cli import main\n"
              + "".join(f"trainer.{k} = {v}\n" for k, v in TINY.items()) + "sys.exit(main(sys.argv[1:]))\n")
    for argv in (["eval", "--checkpoint", str(folder)], ["train", "--checkpoint-dir", str(folder), "--resume"],
                 ["train", *SMALL, "--steps", "1", "--trainable", REDOS]):
        proc = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=60,
                              cwd=tmp_path)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert lines[0].startswith(f"tfplus {argv[0]}: error: ") and "repeats a group that itself repeats" in lines[0]


def test_a_state_file_listing_20k_checkpoints_in_a_full_folder_is_read_in_linear_time(tmp_path):
    """Each entry's data files were found by listing the folder again: 20k entries over 20k files took hours."""
    n = 20_000
    for i in range(n):
        (tmp_path / f"m-{i}.data-00000-of-00001").touch()
    (tmp_path / "checkpoint").write_text(f'model_checkpoint_path: "m-{n - 1}"\n'
                                         + "".join(f'all_model_checkpoint_paths: "m-{i}"\n' for i in range(n)))
    done = {}

    def work():
        done["listed"] = len(tf.train.get_checkpoint_state(str(tmp_path)).all_model_checkpoint_paths)
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(60)  # generous: linear work takes a second or two
    assert done == {"listed": n}
