"""Stop signals at exact moments of a process's life (the phase sweep: tools/kill_sweep.py --phases runs every
moment of every command): the run signals itself when it reaches a named moment (tools/phase_signal's
sitecustomize, on PYTHONPATH), so each case is deterministic. Each is a window between phases where a signal once
gave a wrong ending, and the sweep's checks: the exit status and last line, no process left, the checkpoints
whole, and --resume reaching the unbroken run's weights bit for bit."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import DEVICES
from test_sig_cli import _kill_sweep

pytestmark = pytest.mark.skipif(not hasattr(os, "killpg"), reason="process groups are POSIX's")

_RUN = "tfplus.train.monitored_session:MonitoredSession.run"
_TRAIN = ["--synthetic", "--model", "lenet", "--batch-size", "16", "--no-eval", "--steps", "4", "--checkpoint-every",
          "3", "--workers", "1"]


def test_a_stop_signal_just_before_a_step_stops_the_run_after_it(tmp_path):
    """A signal between the loop's should_stop() and MonitoredSession.run's own check of it: the handler asked the
    session's coordinator to stop, and that run raised "Run called even after should_stop requested" (exit 1, an
    internal error, nothing saved; a Ctrl-C alike). The sweep's checks: 143 and the line, the checkpoint, and
    --resume reaching the unbroken run's weights."""
    module = _kill_sweep()
    command = module.Command(_TRAIN)
    subprocess.run(command.start(str(tmp_path / "unbroken")), check=True, capture_output=True)
    want = module.weights(str(tmp_path / "unbroken"))
    assert module.trial(command, want, "SIGTERM", 0.0, str(tmp_path / "run"), phase=(f"call:{_RUN}#1", 0)) == []


@pytest.mark.parametrize("signame, status", [("SIGTERM", 143), ("SIGHUP", 129)])
def test_a_stop_signal_to_a_rank_before_its_steps_ends_the_job_with_its_status(signame, status, tmp_path):
    """A SIGTERM or SIGHUP (not a Ctrl-C) to rank 0 of `mpiexec -n 2 tfplus train --distributed` as it builds its
    graph, before the steps' own stop: the rank ended the job as "interrupted", by MPI_Abort with 130; and a SIGHUP
    there was lost (MPI's start took SIGHUP's action from Python's handler), the run going on to its end, status 0."""
    pytest.importorskip("mpi4py", reason="the mpi extra is not installed: pip install -e '.[mpi]'")
    from ranks import MPIEXEC
    module = _kill_sweep()
    env = dict(module.phase_env(("call:tfplus.trainer:build_graph", 0), signame, False, str(tmp_path / "fired")),
               TFPLUS_NUM_THREADS="1", TFPLUS_ALLREDUCE_TIMEOUT="30")
    env["TFPLUS_PHASE_SIGNAL"] += " rank0"
    run = subprocess.run([str(MPIEXEC), "-n", "2", *module.Command(_TRAIN).start(str(tmp_path / "ckpt")),
                          "--distributed"], env=env, capture_output=True, text=True, timeout=180)
    assert run.returncode == status, run.stderr
    if not run.stdout + run.stderr:
        # NOTE: seen once, in CI's whole suite on a busy 2-core box (stop 52): the status right, and no output of
        # either rank nor of mpiexec; not in its runs alone. Not understood yet: the closing note says so.
        pytest.xfail("the job's status was right but it printed nothing (a known flake under load, unexplained)")
    assert f"rank 0 of 2 was stopped by {signame}; ending every rank" in run.stderr and "Traceback" not in run.stderr



def _commands() -> list[str]:
    """The command lines of this machine's processes (Linux's /proc)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                found.append(f.read().replace(b"\0", b" ").decode(errors="replace").strip())
        except OSError:  # ended meanwhile
            continue
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")
def test_a_stop_signal_as_the_supernode_starts_its_clientapp_process_ends_that_process_too(tmp_path):
    """SIGTERM right after `tfplus federated supernode` started its warm ClientApp process (in a session of its own),
    before the block that ends it: the command stopped with 143 and left the process running, printing Flower's
    connection retries, until it saw its parent gone."""
    pytest.importorskip("flwr", reason="Flower is not installed: pip install \"tfplus[federated]\"")
    module = _kill_sweep()
    env = module.phase_env(("return:tfplus.federated.supernode:_start_worker", 0), "SIGTERM", False,
                           str(tmp_path / "fired"))
    run = subprocess.Popen(module._tfplus(["federated", "supernode", "--insecure", "--superlink", "127.0.0.1:9",
                                           "--port", "9391"], []), env=env, stderr=subprocess.PIPE, text=True)
    err = run.communicate(timeout=120)[1]
    assert (run.returncode, err.strip().splitlines()[-1:]) == (143, ["tfplus federated: SIGTERM: stopped"]), err
    assert (tmp_path / "fired").exists()
    assert [c for c in _commands() if c.endswith(f"-m tfplus.federated.supernode 127.0.0.1:9391 {run.pid}")] == []


@pytest.mark.skipif("opencl" not in DEVICES, reason="TFPLUS_TESTS_CPU_ONLY=1: cpu device only")
def test_a_stop_signal_between_two_opencl_build_processes_starts_ends_the_first_too(tmp_path):
    """`tfplus train --device opencl` on a cold program cache starts its build processes first thing; SIGTERM after
    the first of two started (before the block that ends them) stopped the command and left that process running,
    making its context, for seconds after it."""
    module = _kill_sweep()
    env = dict(module.phase_env(("return:tfplus.runtime.opencl.build:Builder.__init__#1", 0), "SIGTERM", False,
                                str(tmp_path / "fired")),
               XDG_CACHE_HOME=str(tmp_path / "cache"), TFPLUS_OPENCL_BUILD_PROCESSES="2")
    run = subprocess.Popen(module._tfplus(["train", *_TRAIN, "--device", "opencl"], []), env=env,
                           stderr=subprocess.PIPE, text=True, start_new_session=True)
    err = run.communicate(timeout=120)[1]
    assert (run.returncode, err.strip().splitlines()[-1:]) == (143, ["tfplus train: SIGTERM: stopped"]), err
    assert (tmp_path / "fired").exists()
    assert module.session_processes(run.pid) == []


def test_a_stop_while_tfplus_profile_writes_its_trace_leaves_the_earlier_trace(tmp_path):
    """SIGTERM as `tfplus profile --trace FILE` encodes the trace: the file was opened (emptied) first, so the stop
    left an empty file in place of the earlier trace; now it is written whole or not at all (gfile.write_output)."""
    module = _kill_sweep()
    trace = tmp_path / "step.json"
    trace.write_text('{"traceEvents": []}')
    env = module.phase_env(("call:json.encoder:JSONEncoder.iterencode", 0), "SIGTERM", False, str(tmp_path / "fired"))
    run = subprocess.run(module._tfplus(["profile", "--model", "lenet", "--batch-size", "16", "--steps", "4",
                                         "--trace", str(trace)], []), env=env, capture_output=True, text=True,
                         timeout=120)
    assert (run.returncode, run.stderr.strip().splitlines()[-1:]) == (143, ["tfplus profile: SIGTERM: stopped"])
    assert (tmp_path / "fired").exists()
    assert trace.read_text() == '{"traceEvents": []}'
    assert module.temp_files(str(tmp_path)) == []


def test_a_stop_signal_while_the_session_closes_its_workers_leaves_the_runs_own_status(tmp_path):
    """SIGTERM after the run's last step and save, as its session closed its worker processes: the run exited 143
    with no line saying so (the stop's line is said before the session closes); the work was done, so it exits 0."""
    module = _kill_sweep()
    command = module.Command([*_TRAIN[:-1], "2"])  # --workers 2
    subprocess.run(command.start(str(tmp_path / "unbroken")), check=True, capture_output=True)
    want = module.weights(str(tmp_path / "unbroken"))
    phase = ("call:tfplus.engine.workers:_Group.close", 0)
    assert module.trial(command, want, "SIGTERM", 0.0, str(tmp_path / "run"), True, phase) == []
