"""Segment checkpointing in the memory planner (planner.remat, planner.recompute segments): exact on cpu, planned ==
measured bytes, the MILP's checkpoints within their bound and no dearer than the greedy's, never a random op
recomputed, and the plan says which solver chose which checkpoints."""
from __future__ import annotations

import functools
import re

import numpy as np
import pytest
from modelcheck import (
    assert_planned_bytes_are_measured,
    assert_same_training,
    cnn_feeds,
    small_cnn,
    train_graph,
    train_steps,
)

import tfplus as tf
from tfplus import planner
from tfplus.planner import recompute, remat
from tfplus.planner.arena import check_no_overlap

SEGMENTS = recompute.MAX_LEVEL + 1  # the first recomputation level of segment checkpointing


@pytest.fixture(autouse=True)
def fresh_graph(monkeypatch):
    tf.reset_default_graph()
    monkeypatch.setattr(remat, "TIME_LIMIT", 0.25)  # MILP or greedy, each level is one to check; keep the tests fast
    yield


def _shapes(feeds):
    return {t: v.shape for t, v in feeds.items()}


def small_mobilenet(batch=8):
    """MobileNet of a stem and 4 blocks (training-mode batch norm, ReLU6) on 16x16 images."""
    from tfplus.graphs import get_model, training_graph
    tg = training_graph(get_model("mobilenet").build, total_steps=10, seed=0, image_shape=(3, 16, 16),
                        model_kwargs={"conv_widths": (8, 8, 16, 16, 32)})
    rng = np.random.default_rng(0)
    feeds = {tg.images: rng.standard_normal((batch, 3, 16, 16)).astype(np.float32),
             tg.labels: rng.integers(0, 10, batch).astype(np.int32)}
    return tg, feeds


def _problem(tg, feeds):
    from tfplus.planner.plan import _Step
    from tfplus.runtime.facts import device_facts
    step = _Step([tg.train_op, tg.loss], _shapes(feeds), device_facts("cpu"), tg.graph, None)
    return step, remat._Problem(step.order, step.base_specs, step.feeds, step.fetches, set(), step._op_time)


@pytest.mark.parametrize("model", ["cnn", "mobilenet"])
def test_segment_checkpointing_trains_bit_identically_on_cpu(model):
    """Every segment-checkpointing level trains two steps to the same bits as the plain plan, with its segments'
    ops copied once each and fewer saved bytes than the plain step at its most frugal level."""
    tg, feeds = small_mobilenet() if model == "mobilenet" else (lambda g: (g, cnn_feeds(g)))(small_cnn())
    fetches = [tg.train_op, tg.loss]
    step, _ = _problem(tg, feeds)
    levels = [r for r in step.levels() if r >= SEGMENTS]
    assert levels, step.levels()
    want = train_steps(tg, feeds, budget="1GB", force=(1, 1))
    for r in levels[-1:] if model == "mobilenet" else levels:
        p = planner.plan(fetches, _shapes(feeds), graph=tg.graph, force=(1, 1, False, 1, r))
        (t,) = [t for t in p.transformations if t["name"] == "recompute"]
        assert "segment checkpointing, chosen by " in t["detail"] and "checkpoints kept (" in t["detail"], t
        copies = [op.name for ph in p.phases for op in ph.order if "/recompute_" in op.name]
        assert len(copies) == len(set(copies)) == sum(len(s.ops) for s in step.remat(r).segments)
        check_no_overlap(p.buffers)
        assert_same_training(want, train_steps(tg, feeds, budget="1GB", force=(1, 1, False, 1, r)))
    if model == "mobilenet":  # (the small CNN's peak is not its saved activations)
        plain = planner.plan(fetches, _shapes(feeds), graph=tg.graph, force=(1, 1))
        frugal = planner.plan(fetches, _shapes(feeds), graph=tg.graph, force=(1, 1, False, 1, levels[-1]))
        assert frugal.arena_lower_bound_bytes < plain.arena_lower_bound_bytes


def test_segment_checkpointing_plans_the_bytes_it_measures():
    """A segment-checkpointing plan of the small CNN (at each level): the NumPy data the step holds is its plan's.
    (The small MobileNet's plain step allocates a little outside its plan, so it is not the model here.)"""
    tg = small_cnn()
    feeds = cnn_feeds(tg, batch=16)
    step, _ = _problem(tg, feeds)
    for r in [r for r in step.levels() if r >= SEGMENTS]:
        assert_planned_bytes_are_measured(tg, feeds, force=(1, 1, False, 1, r))


def test_a_program_is_solved_once_per_process(monkeypatch):
    """A budget's plan and the smallest plan pose the same programs: HiGHS solves each once, and both get the
    same checkpoints."""
    tg, feeds = small_mobilenet()
    _, p = _problem(tg, feeds)
    bound = p.memory(p.greedy(None)) + 0.3 * p.dropped_bytes
    monkeypatch.setattr(remat, "_SOLVED", {})
    solved = []
    real = remat._Problem._solve
    monkeypatch.setattr(remat._Problem, "_solve", lambda self, *a: solved.append(a[-1]) or real(self, *a))
    first = p.milp(bound)
    _, again = _problem(tg, feeds)
    assert again.milp(bound) == first and solved == [bound]
    monkeypatch.setattr(remat, "TIME_LIMIT", remat.TIME_LIMIT + 1)  # another program: solved anew
    again.milp(bound)
    assert solved == [bound, bound]


def test_milp_keeps_its_bound_and_costs_no_more_than_greedy(monkeypatch):
    """Each bound's MILP checkpoints fit the modelled bound and cost no more predicted time than the greedy's that
    fit it (within the gap HiGHS reports)."""
    monkeypatch.setattr(remat, "TIME_LIMIT", 30.0)  # (a solution not proven optimal in time is not taken)
    tg, feeds = small_mobilenet()
    _, p = _problem(tg, feeds)
    assert len(p.nodes) <= remat.MAX_NODES < len(p.positions)
    least = p.memory(p.greedy(None))
    for f in (0.5, 0.2):
        bound = least + f * (p.dropped_bytes - least)
        chosen, how = p.milp(bound)
        assert how.startswith("MILP (HiGHS, "), how
        assert p.memory(chosen) <= bound + 1
        g = p.greedy(bound)
        if p.memory(g) <= bound:  # the greedy's is a solution of the program too
            gap = float(re.search(r"within ([\d.]+)%", how).group(1)) / 100
            assert p.cost(chosen) <= p.cost(g) * (1 + gap) + 1e-12


def test_greedy_solver_is_exact_too():
    """solver='greedy' (what runs when HiGHS finds nothing in time) gives segments the planner runs exactly."""
    tg, feeds = small_mobilenet()
    step, _ = _problem(tg, feeds)
    sols = remat.solutions(step.order, step.base_specs, step.feeds, step.fetches, set(), step._op_time,
                           solver="greedy")
    assert sols and all(s.solver.startswith("greedy") for s in sols)
    step._cache["segmented"] = sols  # the planner's levels from the greedy's solutions
    for r in (SEGMENTS, recompute.MAX_LEVEL + len(sols)):
        v = step.view(r)
        assert v.remat is sols[r - SEGMENTS] and v.remat.checkpoints
        dropped = set(v.remat.tensors)
        assert dropped and not dropped & set(v.remat.checkpoints)


def test_random_ops_are_never_recomputed_by_segments():
    """Dropout's mask comes from a random op: no segment copies it (the copies read the saved mask), and a
    seeded step trains to the same bits with and without segment checkpointing."""
    import tfplus.train  # noqa: F401
    with tf.Graph().as_default() as g:
        tf.set_random_seed(1)
        x = tf.placeholder(tf.float32, [None, 64])
        ws = [tf.Variable(np.random.default_rng(i).standard_normal((64, 64)).astype(np.float32) * 0.1)
              for i in range(4)]
        h = x
        for i, w in enumerate(ws):
            h = tf.nn.relu(tf.matmul(h, w))
            if i == 1:
                h = tf.nn.dropout(h, keep_prob=0.5, seed=3)
        loss = tf.reduce_mean(tf.square(h))
        train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
        init = tf.global_variables_initializer()
    feeds = {x: np.random.default_rng(2).standard_normal((16, 64)).astype(np.float32)}
    from tfplus.planner.plan import _Step
    step = _Step([train, loss], _shapes(feeds), "cpu", g, None)
    r = step.levels()[-1]
    assert r >= SEGMENTS
    p = planner.plan([train, loss], _shapes(feeds), graph=g, force=(1, 1, False, 1, r))
    copies = [op for ph in p.phases for op in ph.order if "/recompute_" in op.name]
    assert copies and not any(op.op_def.stateful for op in copies)

    assert_same_training(train_graph(g, init, train, loss, feeds, "1GB", (1, 1)),
                         train_graph(g, init, train, loss, feeds, "1GB", (1, 1, False, 1, r)))


def test_budget_search_reaches_below_the_per_tensor_chains():
    """On the small MobileNet the smallest plan with segment checkpointing is smaller than with the per-tensor
    chains alone (recomputation the only transformation), and a budget between them is met
    by a plan whose description names the solver and its checkpoints."""
    tg, feeds = small_mobilenet(batch=32)
    fetches = [tg.train_op, tg.loss]
    from tfplus.planner.plan import _Step
    step = _Step(fetches, _shapes(feeds), "cpu", tg.graph, None)
    chains = max(r for r in step.levels() if r <= recompute.MAX_LEVEL)
    old = step.build(1, 1, False, 1, chains).peak_bytes
    new = planner.smallest_plan(fetches, _shapes(feeds), graph=tg.graph, transformations=("recompute",))
    assert new.peak_bytes < old
    p = planner.plan(fetches, _shapes(feeds), "cpu", (new.peak_bytes + old) // 2, graph=tg.graph,
                     transformations=("recompute",))
    assert p.fits and "segment checkpointing, chosen by " in p.summary() and "chosen: recompute" in p.summary()


def test_plan_cli_lists_checkpoints_per_budget(capsys, monkeypatch):
    """`tfplus plan --budgets` plans each budget: at the smallest one a small MobileNet fits in without
    micro-batches, the row fits, recomputes by segments, and names the solver and the checkpoints; at a budget
    above the plain step's peak nothing is transformed."""
    import argparse
    import json

    from tfplus import plan_cli
    parser = argparse.ArgumentParser()
    plan_cli.add_parser(parser.add_subparsers(dest="command"))
    base = ["plan", "--model", "mobilenet", "--widths", "8,8,16,16,32", "--batch-size", "32"]
    step = plan_cli._TrainStep(parser.parse_args(base))
    free = step.plan(32, None).peak_bytes
    lo = step.smallest(32, ("compact", "recompute", "scratch", "chunk"))
    assert lo < free
    # Both runs below plan the step just built (same options): its floor, searched once, serves both, and so does
    # its plan for `lo` (the text's run asks for the plan the JSON's listed).
    monkeypatch.setattr(plan_cli, "_TrainStep", lambda args: step)
    # The premise is a plan that recomputes: at this floor the search may price 2 micro-batches (batch norm's
    # statistics passes) below recomputation, so the CLI plans here without micro-batching.
    monkeypatch.setattr(plan_cli, "_plan", functools.partial(
        plan_cli._plan, transformations=tuple(t for t in plan_cli.TRANSFORMATIONS if t != "microbatch")))
    step.plan = functools.cache(step.plan)
    args = parser.parse_args(base + ["--budgets", f"{lo},{free}", "--json"])
    assert args.func(args) == 0
    tight, loose = json.loads(capsys.readouterr().out)["budgets"]
    assert tight["fits"] and tight["peak_bytes"] <= lo and "recompute" in tight["transformations"], tight
    assert tight["solver"] and tight["checkpoints"] and tight["recomputed"], tight
    assert not set(tight["checkpoints"]) & set(tight["recomputed"])
    assert loose["fits"] and loose["transformations"] == [] and loose["predicted_overhead"] == 0
    with pytest.raises(SystemExit):  # a list of no budget is refused, not planned as none
        parser.parse_args(base + ["--budgets", ","])
    assert "names no budget" in capsys.readouterr().err
    args = parser.parse_args(base + ["--budgets", str(lo)])
    assert args.func(args) == 0
    assert re.search(r"recompute: \d+ activations, by .+; \d+ checkpoints: ", capsys.readouterr().out)


def test_segments_through_unrolled_grus_are_exact_and_measured():
    """A tiny seqnet (conv, batch norm, two unrolled GRUs over 4 time steps, whose frontiers hold several tensors):
    its most frugal segment level trains to the same bits as the plain plan, and plans the bytes it holds."""
    from tfplus.graphs import training_graph
    from tfplus.graphs.seqnet import seqnet
    tg = training_graph(seqnet, total_steps=10, seed=0, image_shape=(3, 4, 4), model_kwargs={"conv_widths": (6, 8, 8)})
    rng = np.random.default_rng(0)
    feeds = {tg.images: rng.standard_normal((16, 3, 4, 4)).astype(np.float32),
             tg.labels: rng.integers(0, 10, 16).astype(np.int32)}
    step, _ = _problem(tg, feeds)
    r = step.levels()[-1]
    assert r >= SEGMENTS and any(len(s.readers) > 1 for s in step.remat(r).segments)
    assert_same_training(train_steps(tg, feeds, budget="1GB", force=(1, 1)),
               train_steps(tg, feeds, budget="1GB", force=(1, 1, False, 1, r)))
    assert_planned_bytes_are_measured(tg, feeds, force=(1, 1, False, 1, r))
