"""tf.train.init_from_checkpoint against TensorFlow's (its name maps and errors), and `tfplus train --init-map`."""
from __future__ import annotations

import json

import numpy as np
import pytest

import tfplus
import tfplus.train  # noqa: F401
from tfplus import tensor_bundle
from tfplus.cli import main

# The checkpoint's tensors: a scope, a root-level name and a tensor of another shape.
SAVED = {name: np.random.default_rng(i).standard_normal(shape).astype(np.float32) for i, (name, shape) in
         enumerate([("old/w", (2, 3)), ("old/b", (3,)), ("old/extra", (5,)), ("v", (4,)), ("top", (2,))])}
# (the graph's get_variable names and shapes, the map) for each form of the map; "plain" is a tf.Variable.
FORMS = {
    "scope": ({"new/w": (2, 3), "new/b": (3,), "top": (2,)}, {"old/": "new/"}),
    "one variable, partial": ({"new/w": (2, 3), "new/b": (3,)}, {"old/w": "new/w"}),
    "several": ({"new/w": (2, 3), "new/b": (3,), "top": (2,)}, {"old/b": "new/b", "top": "top"}),
    "checkpoint root": ({"other/v": (4,), "other/top": (2,)}, {"/": "other/"}),
    "graph root": ({"w": (2, 3), "b": (3,)}, {"old/": "/"}),
    "variable object": ({"new/b": (3,)}, {"v": "plain"}),
}
BAD = {
    "missing tensor": ({"new/w": (2, 3)}, {"old/nothing": "new/w"}),
    "shape mismatch": ({"new/w": (2, 3)}, {"old/extra": "new/w"}),
    "scope missing a tensor": ({"new/w": (2, 3), "new/z": (1,)}, {"old/": "new/"}),
    "name that is no variable": ({"new/w": (2, 3)}, {"old/w": "new/nothing"}),
    "scope without slash": ({"new/w": (2, 3)}, {"old/": "new"}),  # TensorFlow's arithmetic looks for old/ew/w
}


def _save(tf, folder) -> str:
    with tf.Graph().as_default():
        vs = [tf.Variable(value, name=name) for name, value in SAVED.items()]
        saver = tf.train.Saver(vs)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            return saver.save(sess, str(folder / "m"))


def _initialized(tf, ckpt, shapes, mapping) -> dict:
    """The values global_variables_initializer gives the graph's variables after init_from_checkpoint."""
    with tf.Graph().as_default():
        made = {name: tf.get_variable(name, shape, initializer=tf.zeros_initializer()) for name, shape in
                shapes.items()}
        made["plain"] = tf.Variable(np.zeros(4, np.float32), name="plain")
        tf.train.init_from_checkpoint(ckpt, {k: made["plain"] if v == "plain" else v for k, v in mapping.items()})
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            return sess.run(made)


@pytest.mark.parametrize("writer", ["tensorflow", "tfplus"])
def test_every_map_form_initializes_as_tensorflow(tf1, tmp_path, writer):
    ckpt = _save(tf1 if writer == "tensorflow" else tfplus, tmp_path)
    for form, (shapes, mapping) in FORMS.items():
        theirs = _initialized(tf1, ckpt, shapes, mapping)
        ours = _initialized(tfplus, str(tmp_path), shapes, mapping)  # the folder: its latest checkpoint
        assert ours.keys() == theirs.keys(), form
        for name in theirs:
            np.testing.assert_array_equal(ours[name], theirs[name], err_msg=f"{form}: {name}")
        assert any(v.any() for v in theirs.values()), form  # something came from the checkpoint


@pytest.mark.parametrize("form", BAD)
def test_bad_maps_raise_as_tensorflow(tf1, tmp_path, form):
    ckpt = _save(tf1, tmp_path)
    shapes, mapping = BAD[form]
    raised = []
    for tf in (tf1, tfplus):
        with pytest.raises(Exception) as e:
            _initialized(tf, ckpt, shapes, mapping)
        raised.append(e.type)
    assert raised[1] is raised[0] is ValueError


def test_the_checkpoint_initializer_runs_on_every_device(tmp_path, device):
    """RestoreV2 reads files on the host: an OpenCL session runs it there, as TensorFlow pins it to /cpu:0 (it
    needed allow_soft_placement)."""
    ckpt = _save(tfplus, tmp_path)
    with tfplus.Graph().as_default():
        w = tfplus.get_variable("new/w", (2, 3), initializer=tfplus.zeros_initializer())
        doubled = w * 2.0
        tfplus.train.init_from_checkpoint(ckpt, {"old/": "new/"})
        with tfplus.Session(device=device) as sess:
            sess.run(tfplus.global_variables_initializer())
            np.testing.assert_array_equal(sess.run(doubled), 2 * SAVED["old/w"])


def test_a_missing_checkpoint_raises_as_tensorflow(tf1, tmp_path):
    """A folder without a checkpoint is a ValueError, a checkpoint file that is not there a NotFoundError."""
    for where, kind in ((str(tmp_path), "ValueError"), (str(tmp_path / "m"), "NotFoundError")):
        raised = []
        for tf in (tf1, tfplus):
            with tf.Graph().as_default(), pytest.raises(Exception) as e:
                tf.get_variable("new/w", (2,))
                tf.train.init_from_checkpoint(where, {"old/": "new/"})
            raised.append(e.type.__name__)
        assert raised == [kind, kind], where


# -- tfplus train --init-map ---------------------------------------------------------------------------------
SMALL = ["--synthetic", "--model", "lenet", "--batch-size", "16", "--no-eval"]


@pytest.fixture(scope="module")
def renamed(tmp_path_factory):
    """A lenet run on classes 0-4 whose checkpoint holds its variables under the scope 'pretrained/'."""
    folder = tmp_path_factory.mktemp("pre")
    assert main(["train", *SMALL, "--steps", "2", "--classes", "0-4", "--checkpoint-dir", str(folder / "run")]) == 0
    run = tfplus.train.latest_checkpoint(str(folder / "run"))
    with tfplus.train.load_checkpoint(run) as reader:
        names = [n for n in reader.get_variable_to_shape_map() if n.split("/")[0] in ("conv1", "conv2", "fc1",
                                                                                       "fc2", "fc3")]
        tensor_bundle.write_bundle(str(folder / "renamed"), {f"pretrained/{n}": reader.get_tensor(n) for n in names})
    return run, str(folder / "renamed")


def test_init_map_renames_a_scope_and_leaves_a_new_head_fresh(renamed, tmp_path, capsys):
    run, ckpt = renamed
    (tmp_path / "map.json").write_text(json.dumps({"pretrained/": "/"}))
    out = tmp_path / "ft"
    capsys.readouterr()
    assert main(["train", *SMALL, "--steps", "2", "--classes", "5-9", "--init-from", ckpt, "--init-map",
                 str(tmp_path / "map.json"), "--fc-widths", "120,32", "--fine-tune-last", "1",
                 "--checkpoint-dir", str(out)]) == 0
    err = capsys.readouterr().err
    assert (f"init from {ckpt}: restored 7 of 10 model variables (7 renamed), left 3 fresh (scopes fc2, fc3)"
            in err)
    assert "not restored: fc2/weights (shape mismatch: checkpoint pretrained/fc2/weights [120, 84], model " \
           "[120, 32])" in err
    after = tfplus.train.latest_checkpoint(str(out))
    for frozen in ("conv1/weights", "fc1/biases"):   # restored under its new name, and not trained
        np.testing.assert_array_equal(tfplus.train.load_variable(after, frozen),
                                      tfplus.train.load_variable(run, frozen))


@pytest.mark.parametrize("argv, message", [
    (["--init-map", "nope"], "argument --init-map: nope: neither OLD=NEW nor a JSON file"),
    (["--init-map", "a b=c/"], "argument --init-map: 'a b'='c/': 'a b' is not a variable name or scope"),
    (["--init-map", "{tmp}/list.json"], "the JSON must be an object {OLD: NEW}, got list"),
    (["--init-map", "pretrained/nothing=conv1/weights"], "--init-map: Tensor pretrained/nothing is not found in"),
    (["--init-map", "pretrained/=nosuch/"], "--init-map pretrained/=nosuch/: no model variable is under 'nosuch/'"),
    (["--init-map", "pretrained/conv1/weights=conv1/nothing"], "Assignment map with scope only name conv1"),
    (["--init-map", "pretrained/=/", "--init-map", "pretrained/=conv1/"], "--init-map maps pretrained/ twice"),
])
def test_bad_init_map_is_one_clear_line(renamed, argv, message, tmp_path, capsys):
    (tmp_path / "list.json").write_text("[1]")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(["train", *SMALL, "--steps", "1", "--init-from", renamed[1], *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_init_map_needs_init_from(capsys):
    assert main(["train", *SMALL, "--steps", "1", "--init-map", "a/=b/"]) == 2
    assert "--init-map needs --init-from CKPT" in capsys.readouterr().err


def test_a_partial_map_renames_what_it_covers_and_the_rest_keeps_its_names(tmp_path):
    from tfplus import finetune
    tensor_bundle.write_bundle(str(tmp_path / "m"), {"pretrained/conv1/w": np.ones((2, 2), np.float32),
                                                     "fc/b": np.full(3, 2, np.float32),
                                                     "fc/w": np.ones((4, 3), np.float32)})
    with tfplus.Graph().as_default():
        mine = [tfplus.Variable(np.zeros(shape, np.float32), name=name)
                for name, shape in (("conv1/w", (2, 2)), ("fc/b", (3,)), ("fc/w", (5, 3)), ("fc/extra", (1,)))]
        found = finetune.init_from(mine, str(tmp_path / "m"), {"pretrained/conv1/": "conv1/"})
        init = tfplus.global_variables_initializer()
        with tfplus.Session() as sess:
            sess.run(init)
            found.restore(sess)
            values = sess.run(mine)
    assert found.restored == ["conv1/w", "fc/b"] and found.renamed == {"conv1/w": "pretrained/conv1/w"}
    assert found.skipped == [("fc/w", "shape mismatch: checkpoint [4, 3], model [5, 3]"), ("fc/extra", "missing")]
    assert values[0].tolist() == [[1, 1], [1, 1]] and values[1].tolist() == [2, 2, 2] and not values[2].any()
