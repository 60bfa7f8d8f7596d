"""OpenCL build processes started at a process's first moment (opencl.build.early, which `tfplus train --device
opencl` enters first thing): prebuild's start_builders uses those it needs and ends the others, a cached run starts
none, a CPU device uses none, and none outlives the block that started it (each is checked by its returncode)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from conftest import needs_opencl

from tfplus.cli import main
from tfplus.runtime import opencl
from tfplus.runtime.opencl import build, discovery

pytestmark = needs_opencl


@pytest.fixture
def started(tmp_path, monkeypatch):
    """The Builders made in the test, in order, with an empty cache and TFPLUS_DEBUG off."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("TFPLUS_DEBUG", raising=False)
    made = []

    class Recorded(build.Builder):
        def __init__(self, selector):
            super().__init__(selector)
            made.append(self)
    monkeypatch.setattr(build, "Builder", Recorded)
    yield made
    for b in made:  # no test leaves a process behind, even a failing one
        b.close(now=True)


def _keys(n: int) -> list:
    return [(("elementwise.cl",), f"-DT=float -DWANT_add=1 -DN={i}") for i in range(n)]


def _ended(builders) -> bool:
    return all(b.proc.returncode is not None for b in builders)


def test_early_processes_are_used_by_prebuild_and_those_not_needed_end(started, monkeypatch):
    monkeypatch.setenv("TFPLUS_OPENCL_BUILD_PROCESSES", "3")
    d = opencl.select(None)
    with build.early(None, "train-x"):
        assert len(started) == 3 and build._early == started
        taken = build.start_builders(d, _keys(8))  # two wanted: one per four programs to build
        assert taken == started[:2] and not build._early and _ended(started[2:])
        index = [x.int_ptr for x in discovery.cl_devices()].index(d.int_ptr)
        assert all(b.index == index and b.wait_ready() for b in taken)
    assert not _ended(taken)  # the trainer's now: its build threads end them
    for b in taken:
        b.close()
        assert b.proc.returncode == 0
    assert len(started) == 3  # none started besides


def test_an_early_process_is_replaced_if_it_ended_and_not_used_on_another_device(started, monkeypatch):
    monkeypatch.setenv("TFPLUS_OPENCL_BUILD_PROCESSES", "1")
    d = opencl.select(None)
    with build.early("99", "train-x"):  # no such device: the child exits at once
        started[0].proc.wait(timeout=60)
        taken = build.start_builders(d, _keys(4))
        assert len(started) == 2 and taken == started[1:]  # a new one, told the device's index
        assert taken[0].wait_ready()
        taken[0].close()
    with build.early(None, "train-x"):
        taken = build.start_builders(d, _keys(4))
        taken[0].index = 99  # as if the child had chosen another device than the parent
        assert taken == started[2:] and not taken[0].wait_ready()
        taken[0].close()
    assert _ended(started)


def test_a_cached_run_starts_none_and_a_cpu_device_uses_none(started, monkeypatch):
    d = opencl.select(None)
    opencl.write_program_list(build.programs_path(d), "train-x", _keys(8))  # a run of train-x recorded its list
    with build.early(None, "train-x"):
        assert not started
    monkeypatch.setenv("TFPLUS_OPENCL_BUILD_PROCESSES", "2")
    with build.early(None, "train-y"):
        assert len(started) == 2
        for key in build.merge_wants(_keys(8), ())[0]:  # its programs are all built already
            path = build.program_source(d, *key)[2]
            path.write_bytes(b"built")
        assert build.start_builders(d, _keys(8)) == [] and _ended(started)
    monkeypatch.delenv("TFPLUS_OPENCL_BUILD_PROCESSES")
    if d.type & opencl.cl.device_type.GPU:
        return
    with build.early(None, "train-z"):  # a CPU device (PoCL): no build processes, whatever is left to build
        n = len(started) - 2
        assert n == build.build_processes() and build.start_builders(d, _keys(80)) == [] and _ended(started)


@pytest.mark.parametrize("argv, starts", [
    (["train", "--device", "opencl", "--no-such-option"], 1),  # refused by the parser: ended at the return
    (["train", "--device=opencl:0", "--model", "lenet", "--steps", "0"], 1),
    (["train", "--device", "cpu", "--no-such-option"], 0),
    (["plan", "--device", "opencl", "--no-such-option"], 0),
])
def test_tfplus_train_on_opencl_starts_them_first_and_ends_them_by_its_return(started, monkeypatch, capsys, argv,
                                                                               starts):
    monkeypatch.setenv("TFPLUS_OPENCL_BUILD_PROCESSES", "1")
    assert main(argv) == 2
    assert len(started) == starts and _ended(started) and not build._early
    capsys.readouterr()


def test_the_switches_start_none(started, monkeypatch):
    for var in ("TFPLUS_OPENCL_PREBUILD", "TFPLUS_OPENCL_BUILD_PROCESSES"):
        monkeypatch.setenv(var, "0")
        with build.early(None, "train-x"):
            assert not started
        monkeypatch.delenv(var)
    monkeypatch.setenv("TFPLUS_OPENCL_BUILD_PROCESSES", "many")  # said by start_builders, as before
    with build.early(None, "train-x"):
        assert not started


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, ended and not yet reaped by its new parent, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:  # no /proc: a live process, as os.kill said
        return True


def test_the_processes_of_a_killed_parent_end_by_themselves(tmp_path):
    code = ("import time\nfrom tfplus.runtime.opencl import build\nwith build.early(None, 'train-x'):\n"
            "    print(*[b.proc.pid for b in build._early], flush=True)\n    time.sleep(600)\n")
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path), TFPLUS_OPENCL_BUILD_PROCESSES="2")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    pids = [int(pid) for pid in parent.stdout.readline().split()]
    parent.kill()  # no block left, no exit handler: the children see their input end
    parent.wait()
    assert len(pids) == 2
    while any(_alive(pid) for pid in pids):  # pytest's timeout would end a hang
        time.sleep(0.05)
