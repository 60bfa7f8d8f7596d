"""Optimizer slots paged to host memory (planner.paging, engine.paging) on opencl (PoCL in CI): the paged step trains
as the step with its slots on the device, bit for bit where the same kernels run; the device ledger finds the
plan's peak to the byte; the planner pages where that fits a budget nothing else does, never on the cpu; and the
slots stay ordinary variables to fetches, the Saver and TensorFlow's checkpoint reader."""
from __future__ import annotations

import gc
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import needs_opencl
from modelcheck import checkpoint_variables, small_cnn

import tfplus as tf
from tfplus import planner
from tfplus.engine.memory import install, measure_device_step
from tfplus.graphs import get_model, training_graph
from tfplus.planner import paging
from tfplus.runtime.facts import device_facts
from tfplus.step_budget import floor, training_runs

STEPS = 3


def _graph(optimizer: str, model: str = "mentee"):
    import tfplus.train  # noqa: F401  (tf.train, until tfplus/__init__ imports it)
    if model == "mobilenet":
        return training_graph(get_model("mobilenet").build, total_steps=10, seed=0, optimizer=optimizer,
                              image_shape=(3, 8, 8), model_kwargs={"conv_widths": (4, 8, 8)})
    return training_graph(get_model("mentee").build, total_steps=10, seed=0, optimizer=optimizer,
                          image_shape=(3, 16, 16), model_kwargs={"conv_widths": (4, 8), "fc_widths": (16,)})


def _feeds(tg, batch: int = 8) -> dict:
    rng = np.random.default_rng(0)
    shape = (batch, *tg.images.shape[1:])
    return {tg.images: rng.standard_normal(shape).astype(np.float32),
            tg.labels: rng.integers(0, 10, batch).astype(np.int32)}


def _train(tg, feeds, page: bool | None, budget=None):
    """Losses of STEPS steps on opencl, every variable after them (slots included, fetched), the plan, the ledger's
    measurement of the last step and whether it replayed a tape. `page` not None: the plain plan, forced with the
    slots paged or not; else the session's own plan for `budget`."""
    fetches = [tg.train_op, tg.loss]
    gc.collect()  # other tests' device buffers go back to the pool before the ledger is read
    with tf.Session(graph=tg.graph, device="opencl", memory_budget=budget or "1GB") as sess:
        sess.run(tg.init_op)
        if page is not None:
            p = planner.plan(fetches, {t: v.shape for t, v in feeds.items()}, device_facts(sess.runtime),
                             graph=tg.graph, force=(1, 1), page=page)
            install(sess, fetches, p)
        losses = [sess.run(fetches, feeds)[1] for _ in range(STEPS)]
        m = measure_device_step(sess, fetches, feeds)
        step = next(s for s in sess.steps if tg.loss.name in [getattr(f, "name", None) for f in s.fetches])
        replayed = any(t.tape is not None for prog in step.programs for t in prog.tapes.values()) or \
            step.bound.whole.tape is not None
        values = {v.op.name: sess.run(v) for v in tg.graph.get_collection("variables")}
    return losses, values, step.plan, m, replayed


@needs_opencl
@pytest.mark.parametrize("model", ["mentee", "mobilenet"])
@pytest.mark.parametrize("optimizer", ["momentum", "adam"])
def test_paged_slots_train_as_the_slots_on_the_device(optimizer, model):
    """The plain plan with its slots paged: the same kernels on the same values, so the same bits in every variable
    and slot after STEPS steps (the tape replaying the copies); the ledger's peak is the plan's, which holds the
    staging buffer in place of the slots; no device buffer is made during a step."""
    tg = _graph(optimizer, model)
    feeds = _feeds(tg, 4 if model == "mobilenet" else 8)
    want = _train(tg, feeds, page=False)
    got = _train(tg, feeds, page=True)
    p = got[2]
    assert p.paging is not None and len(p.paging.slots) == (2 if optimizer == "adam" else 1) * \
        len(tg.graph.get_collection("trainable_variables"))
    assert p.slot_bytes < want[2].slot_bytes and any(t["name"] == "page" for t in p.transformations)
    assert got[0] == want[0]
    for name, value in want[1].items():
        np.testing.assert_array_equal(got[1][name], value, err_msg=name)
    assert got[3]["peak"] == p.peak_bytes and got[3]["allocations"] == 0, (got[3], p.peak_bytes)
    # paging keeps the tape where the step has one (Adam's beta-power Assigns run the careful loop either way)
    assert got[4] == want[4] and (got[4] or optimizer == "adam"), (got[4], want[4])


@needs_opencl
@pytest.mark.parametrize("optimizer", ["momentum", "adam"])
def test_a_budget_only_paging_fits_pages_and_trains_as_the_plain_step(optimizer, monkeypatch):
    """A budget below the floor with the slots on the device (paging switched off) but above the paged floor: the
    session's planner pages (the rewritten graph's fused update, in packs through the staging buffer), its steps
    give the unbudgeted step's weights within float tolerance (micro-batches sum gradients in another order), and
    the ledger finds the planned peak, within the budget."""
    tg = _graph(optimizer)
    feeds = _feeds(tg, 8)
    runs = training_runs(tg, [tg.train_op, tg.loss], 8)  # as the session plans them: rewritten
    resident = floor(tg.graph, runs, "opencl")  # (the default: TFPLUS_PAGE_SLOTS unset)
    monkeypatch.setattr(paging, "PAGE", True)  # TFPLUS_PAGE_SLOTS=1
    paged = floor(tg.graph, runs, "opencl")
    assert paged.paging is not None and paged.budget_bytes < resident.budget_bytes
    budget = resident.budget_bytes - 1
    want = _train(tg, feeds, page=None, budget="1GB")
    got = _train(tg, feeds, page=None, budget=budget)
    p = got[2]
    assert p.paging is not None and p.fits and "paged" in p.choice
    assert "paged slots" in p.summary() and p.to_json()["paged_slots"]["host_bytes"] == p.paging.paged_bytes
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    for name, value in want[1].items():
        np.testing.assert_allclose(got[1][name], value, rtol=1e-4, atol=1e-6, err_msg=name)
    assert got[3]["peak"] == p.peak_bytes <= budget and got[3]["allocations"] == 0, (got[3], p.peak_bytes)


def test_the_cpu_never_pages():
    """On the cpu the host is the device: no plan pages, asked or at a budget that needs transformations."""
    tg = small_cnn()
    feeds = _feeds(tg, 8)
    fetches, shapes = [tg.train_op, tg.loss], {t: v.shape for t, v in feeds.items()}
    facts = device_facts("cpu")
    assert planner.plan(fetches, shapes, facts, graph=tg.graph, force=(1, 1), page=True).paging is None
    free = planner.plan(fetches, shapes, facts, graph=tg.graph)
    tight = planner.plan(fetches, shapes, facts, int(free.peak_bytes * 0.7), graph=tg.graph)
    assert tight.fits and tight.predicted_overhead > 0 and tight.paging is None


@needs_opencl
def test_paged_slots_save_and_restore_as_variables(tmp_path):
    """A Saver of a session whose slots are paged writes their host values (TensorFlow's reader finds them); a
    restore into a paged session writes them home through the staging buffer, and its next steps are the
    uninterrupted run's."""
    tg = _graph("momentum")
    feeds = _feeds(tg)
    fetches = [tg.train_op, tg.loss]
    with tg.graph.as_default():
        saver = tf.train.Saver()

    def session():
        sess = tf.Session(graph=tg.graph, device="opencl", memory_budget="1GB")
        sess.run(tg.init_op)
        p = planner.plan(fetches, {t: v.shape for t, v in feeds.items()}, device_facts(sess.runtime),
                         graph=tg.graph, force=(1, 1), page=True)
        install(sess, fetches, p)
        return sess, p
    sess, p = session()
    with sess:
        sess.run(fetches, feeds)
        before = {v.op.name: sess.run(v) for v in tg.graph.get_collection("variables")}
        path = saver.save(sess, str(tmp_path / "ckpt"))
        later = [sess.run(fetches, feeds)[1] for _ in range(2)]
        after = {v.op.name: sess.run(v) for v in tg.graph.get_collection("variables")}
    saved = checkpoint_variables(path)
    for name in p.paging.slots:
        np.testing.assert_array_equal(saved[name], before[name], err_msg=name)
        assert np.any(saved[name] != 0), "a step moved the momentum"
    import tensorflow as tf1  # the oracle reads the same values
    reader = tf1.compat.v1.train.NewCheckpointReader(path)
    for name in p.paging.slots:
        np.testing.assert_array_equal(reader.get_tensor(name), before[name], err_msg=name)
    sess, _ = session()
    with sess:
        sess.run(tg.init_op)  # (the slots back to zeros first: the restore must write them)
        saver.restore(sess, path)
        for name in p.paging.slots:
            np.testing.assert_array_equal(sess.variable_value(name), before[name], err_msg=name)
        again = [sess.run(fetches, feeds)[1] for _ in range(2)]
        for name, value in after.items():
            np.testing.assert_array_equal(sess.run(tg.graph.get_tensor_by_name(name + ":0")), value, err_msg=name)
    assert again == later


@needs_opencl
def test_another_program_updating_paged_slots_stages_them_apart():
    """After paged steps, a step of other fetches (its own plan, which does not page) updates the slots in buffers of
    its own, not in the paging plan's arena: every variable then is the unpaged session's, bit for bit."""
    tg = _graph("momentum")
    feeds = _feeds(tg)
    fetches = [tg.train_op, tg.loss]

    def run(page: bool) -> dict:
        with tf.Session(graph=tg.graph, device="opencl", memory_budget="1GB") as sess:
            sess.run(tg.init_op)
            p = planner.plan(fetches, {t: v.shape for t, v in feeds.items()}, device_facts(sess.runtime),
                             graph=tg.graph, force=(1, 1), page=page)
            install(sess, fetches, p)
            for _ in range(2):
                sess.run(fetches, feeds)
            sess.run(tg.train_op, feeds)  # another step: the session's own plan of the rewritten graph
            sess.run(fetches, feeds)
            assert (sess._executor.paged is not None) == page
            return {v.op.name: sess.run(v) for v in tg.graph.get_collection("variables")}
    want, got = run(False), run(True)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)


@pytest.mark.parametrize("value, chosen", [("", "False"), ("1", "True"), ("0", "False"), ("yes", None)])
def test_the_planners_choice_of_paging_is_TFPLUS_PAGE_SLOTS(value, chosen):
    done = subprocess.run([sys.executable, "-c", "from tfplus.planner import paging; print(paging.chosen())"],
                          env=dict(os.environ, TFPLUS_PAGE_SLOTS=value), capture_output=True, text=True, timeout=60)
    if chosen is None:
        assert done.returncode != 0 and "TFPLUS_PAGE_SLOTS='yes': give 1" in done.stderr, done.stderr
    else:
        assert done.stdout.strip() == chosen, done.stderr
