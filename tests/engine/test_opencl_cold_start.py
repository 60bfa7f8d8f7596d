"""OpenCL cold start: built programs come back from the disk cache without compiling, the first-step line says
what compiling cost, GEMM tuning stops at its time budget (TFPLUS_OPENCL_TUNE_S), and programs built ahead on
background threads (prebuild, program lists) give what building them when asked for gives."""
from __future__ import annotations

import contextlib
import importlib.resources
import json
import os
import time
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import needs_opencl

import tfplus as tf
from tfplus.kernels.opencl import _tune
from tfplus.runtime import opencl
from tfplus.runtime.opencl import build, device, discovery
from tfplus.runtime.opencl.device import Device

pytestmark = needs_opencl


def test_a_built_program_is_loaded_from_the_cache_not_compiled(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    dev = opencl.OpenCLRuntime().dev
    monkeypatch.setattr(dev, "compiling", build.CompileNotice())
    options = f"-DT=float -DSFX=f32 -DIS_FLOAT=1 -DIS_SIGNED=1 -DWANT_cifar_augment=1 -DNONCE={os.getpid()}"
    dev._build(("image.cl",), options)
    assert dev.compiling.count == 1 and len(list((tmp_path / "tfplus" / "opencl").glob("*.bin"))) == 1
    prg = dev._build(("image.cl",), options)  # a new process would do this: the binary, no compiler
    assert dev.compiling.count == 1 and prg.get_info(opencl.cl.program_info.KERNEL_NAMES) == "cifar_augment_f32"
    assert dev.compiling.summary().startswith("built 1 OpenCL program (first run on this device): ")
    capfd.readouterr()


def _gpu_runtime():
    dev = SimpleNamespace(is_gpu=True, tuning={}, max_wg=1024, tune_seconds=0.0, save_tuning=lambda: None,
                          programs_of=lambda run, cfg: [], prebuild=lambda keys: 0)
    return SimpleNamespace(dev=dev, info={"local_mem_bytes": 49152}, synchronize=lambda: None,
                           describe=lambda: "a GPU", timing=lambda: contextlib.nullcontext([]))


def test_tuning_stops_at_its_budget(monkeypatch):
    rt, tried = _gpu_runtime(), []
    monkeypatch.setenv("TFPLUS_OPENCL_TUNE_S", "inf")
    best = _tune.choose(rt, "gemm|a", 4, tried.append)
    suffix = "|" + os.environ.get("TFPLUS_OPENCL_BUILD_OPTIONS", "")
    assert len(tried) > 4 and rt.dev.tuning["gemm|a" + suffix] == list(best) and rt.dev.tune_seconds > 0
    monkeypatch.setenv("TFPLUS_OPENCL_TUNE_S", str(rt.dev.tune_seconds))  # spent: the default, untimed
    tried.clear()
    assert _tune.choose(rt, "gemm|b", 4, tried.append) == _tune.GPU_DEFAULT and not tried
    assert "gemm|b" + suffix not in rt.dev.tuning  # left for a later process
    monkeypatch.setenv("TFPLUS_OPENCL_TUNE_S", "soon")
    with pytest.raises(ValueError, match="TFPLUS_OPENCL_TUNE_S='soon'"):
        _tune.choose(rt, "gemm|c", 4, tried.append)


class _Clock:
    """A fake GPU clock for _tune.choose: each launch of tile `cfg` takes times[cfg] ns (rt.timing's events)."""

    def __init__(self, times: dict):
        self.times, self.events = times, None

    @contextlib.contextmanager
    def timing(self):
        self.events = []
        yield self.events
        self.events = None

    def run(self, cfg):
        if self.events is not None:
            ns = self.times.get(cfg, 200)
            self.events.append(("k", SimpleNamespace(profile=SimpleNamespace(start=0, end=ns))))


@pytest.mark.parametrize("used_ns, family, wins", [(104, "00", True), (110, "00", False), (104, "01", False)])
def test_tuning_takes_a_tile_its_kernel_already_uses_when_near_the_best(monkeypatch, used_ns, family, wins):
    """A tile that a problem of the same kernel and flags already uses is a program less to build on a fresh
    machine: it wins within NEAR (5%) of the best, not further, and not for another family of flags."""
    monkeypatch.setenv("TFPLUS_OPENCL_TUNE_S", "inf")
    best, used = _tune.GPU_CANDIDATES[0], _tune.GPU_CANDIDATES[1]
    clock = _Clock({best: 100, used: used_ns})
    rt = _gpu_runtime()
    rt.timing = clock.timing
    suffix = "|" + os.environ.get("TFPLUS_OPENCL_BUILD_OPTIONS", "")
    rt.dev.tuning[f"matmul|float32|{family}|7x7x7" + suffix] = list(used)
    assert _tune.choose(rt, "matmul|float32|00|9x9x9", 4, clock.run) == (used if wins else best)


# -- programs built ahead (prebuild): background threads, program lists ------------------------------------
def _fresh_device(monkeypatch, tmp_path):
    """A new _Device (own context, no programs) with an empty cache, counting _build calls."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(Device, "_all", {})
    builds = []
    real_build = Device._build

    def counted(self, files, options, background=False, builder=None):
        builds.append((files, options))
        return real_build(self, files, options, background, builder)
    monkeypatch.setattr(Device, "_build", counted)
    dev = opencl.OpenCLRuntime().dev
    monkeypatch.setattr(dev, "compiling", build.CompileNotice())
    return dev, builds


def _relu_affine():
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, (3, 5))
        y = tf.nn.relu(x * 2.0 - 1.0)
    return g, x, y


def _first_run(monkeypatch, tmp_path):
    """_relu_affine's graph run once on a fresh device: (run(): its result on the current device, that result,
    the programs it asked for in order: the list prebuild reads next time)."""
    g, x, y = _relu_affine()
    feed = {x: np.linspace(-1, 1, 15, dtype=np.float32).reshape(3, 5)}

    def run():
        with tf.Session(graph=g, device="opencl") as s:
            return s.run(y, feed)
    dev, builds = _fresh_device(monkeypatch, tmp_path / "first")
    want = run()
    assert dev.used and builds == dev.used
    return run, want, list(dev.used)


def test_prebuilt_programs_give_the_same_results_and_are_built_once(tmp_path, monkeypatch):
    run, want, used = _first_run(monkeypatch, tmp_path)
    dev, builds = _fresh_device(monkeypatch, tmp_path / "b")  # a fresh machine: nothing cached
    # The float elementwise programs differ only in their -DWANT_ flags: one build holds all their kernels.
    assert len(used) == 3 and dev.prebuild(used) == 1 and dev.prebuild(used) == 0  # queued once
    np.testing.assert_array_equal(run(), want)
    (files, options), = builds
    assert all(files == f and set(o.split()) <= set(options.split()) for f, o in used)
    assert dev.used == used  # the list the next run records keeps each program's own key
    assert not dev.builds.queue and not dev.builds.done and dev.compiling.count == 1


def test_a_merged_prebuild_not_started_yet_is_built_when_asked_for(tmp_path, monkeypatch):
    """A step that needs a kernel before the build threads got to its merged program builds that program, with
    all its kernels, instead of one program per kernel."""
    run, want, used = _first_run(monkeypatch, tmp_path)
    dev, builds = _fresh_device(monkeypatch, tmp_path / "b")
    monkeypatch.setattr(build.Builds, "THREADS", 0)  # queued, never started
    assert dev.prebuild(used) == 1 and dev.builds.queue
    np.testing.assert_array_equal(run(), want)
    (files, options), = builds
    assert options.count("-DWANT_") == 3 and not dev.builds.queue


def _parent_compiles(monkeypatch) -> list:
    """What this process makes its programs from, in order: "source" (it compiles) or "binary" (a built one)."""
    made = []

    class Program(opencl.cl._cl._Program):
        def __init__(self, ctx, *args):
            made.append("source" if isinstance(args[0], str) else "binary")
            super().__init__(ctx, *args)
    monkeypatch.setattr(opencl.cl._cl, "_Program", Program)
    return made


@pytest.mark.parametrize("starts", [True, False])
def test_a_child_process_builds_what_the_parent_loads_else_the_parent_builds(tmp_path, monkeypatch, starts):
    run, want, used = _first_run(monkeypatch, tmp_path)
    dev, builds = _fresh_device(monkeypatch, tmp_path / "b")
    monkeypatch.setattr(build.Builds, "THREADS", 0)  # no build thread of this process: only the child's
    made = _parent_compiles(monkeypatch)
    # A child given a device index that does not exist makes no context: its thread hands it nothing.
    index = [x.int_ptr for x in discovery.cl_devices()].index(dev.device.int_ptr) if starts else 99
    child = build.Builder(index)
    assert dev.prebuild(used, [child]) == 1
    while starts and dev.builds.queue:  # taken by the child's thread (else the step would build it itself)
        time.sleep(0.01)
    np.testing.assert_array_equal(run(), want)
    assert made == (["binary"] if starts else ["source"]) and len(builds) == 1
    assert dev.compiling.count == 1 and child.proc.wait(timeout=30) == 0


def test_a_child_process_imports_the_parent_s_tfplus_whatever_the_working_folder(tmp_path, monkeypatch):
    """Started from a folder holding another tfplus/ (a source checkout, whose package lacks the installed ops
    and kernels), the child still imports this process's tfplus and makes its context."""
    decoy = tmp_path / "tfplus"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise ImportError('the decoy tfplus was imported')\n")
    monkeypatch.chdir(tmp_path)
    dev = Device.get(opencl.select("0"))
    index = [x.int_ptr for x in discovery.cl_devices()].index(dev.device.int_ptr)
    child = build.Builder(index)
    assert child.wait_ready()
    child.close()
    assert child.proc.returncode == 0


def test_build_processes_start_for_uncached_programs_only_and_a_bad_count_is_named(tmp_path, monkeypatch,
                                                                                   capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    started = []
    monkeypatch.setattr(build, "Builder", lambda index: started.append(index) or SimpleNamespace())
    d = opencl.select(None)
    keys = [(("elementwise.cl",), f"-DT=float -DWANT_add=1 -DN={i}") for i in range(9)]
    monkeypatch.setenv("TFPLUS_OPENCL_BUILD_PROCESSES", "3")
    assert len(build.start_builders(d, keys)) == 2  # one per four programs to build
    assert started == [[x.int_ptr for x in discovery.cl_devices()].index(d.int_ptr)] * 2
    for k in keys[1:]:  # all but one in the disk cache: nothing for a child to do
        path = build.program_source(d, *k)[2]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"built")
    assert build.start_builders(d, keys) == []
    for bad in ("-3", "four"):
        monkeypatch.setenv("TFPLUS_OPENCL_BUILD_PROCESSES", bad)
        with pytest.raises(ValueError, match=f"TFPLUS_OPENCL_BUILD_PROCESSES='{bad}'"):
            build.build_processes(d)
    assert build.start_builders(d, keys[:1] * 8) == []  # prebuild's thread says so and builds on threads
    assert "TFPLUS_OPENCL_BUILD_PROCESSES='four': expected a count" in capsys.readouterr().err
    monkeypatch.delenv("TFPLUS_OPENCL_BUILD_PROCESSES")
    assert build.build_processes(d) == (min(8, os.cpu_count() // 2) if d.type & opencl.cl.device_type.GPU else 0)


def test_a_failed_merged_prebuild_builds_each_program_alone(tmp_path, monkeypatch):
    run, want, used = _first_run(monkeypatch, tmp_path)
    real_build = Device._build

    def no_merges(self, files, options, background=False, builder=None):  # as if two kernels clashed
        if options.count("-DWANT_") > 1:
            raise RuntimeError("clash")
        return real_build(self, files, options, background, builder)
    monkeypatch.setattr(Device, "_build", no_merges)
    dev, builds = _fresh_device(monkeypatch, tmp_path / "b")
    assert dev.prebuild(used) == 1
    np.testing.assert_array_equal(run(), want)
    assert builds[0][1].count("-DWANT_") == 3 and sorted(builds[1:]) == sorted(used)


def test_a_failed_prebuild_is_built_again_when_asked_for_and_named(tmp_path, monkeypatch):
    dev, builds = _fresh_device(monkeypatch, tmp_path)
    bad = (("elementwise.cl",), "-DT=no_such_type -DSFX=f32 -DIS_FLOAT=1 -DIS_SIGNED=1 -DWANT_add=1")
    dev.prebuild([bad])
    for t in list(dev.builds.threads):
        t.join()
    assert isinstance(dev.builds.done[bad], RuntimeError)
    with pytest.raises(RuntimeError, match=r"OpenCL build of elementwise\.cl \[.*-DT=no_such_type.*\] .*failed"):
        dev.program(*bad)
    assert builds == [bad, bad] and dev.compiling.count == 0


def test_programs_of_lists_a_launchers_programs_without_building_or_launching(tmp_path, monkeypatch):
    from tfplus.kernels.opencl.elementwise import binary
    dev, builds = _fresh_device(monkeypatch, tmp_path)
    rt = opencl.OpenCLRuntime()
    a = rt.copy_in(np.arange(6, dtype=np.float32))
    out = rt.allocate((6,), np.float32)
    keys = dev.programs_of(binary, rt, "add", out, a, a)
    assert len(keys) == 1 and keys[0][0] == ("elementwise.cl",) and "-DWANT_add=1" in keys[0][1]
    assert not builds and not dev.programs
    binary(rt, "add", out, a, a)  # the kernel the listing made is a real one
    np.testing.assert_array_equal(rt.copy_out(out), np.arange(6) * 2.0)
    assert builds == keys


def test_program_lists_round_trip_and_a_bad_list_is_ignored(tmp_path, monkeypatch):
    path = tmp_path / "programs.json"
    keys = [(("elementwise.cl",), "-DT=float -DWANT_add=1"),
            (("conv.cl", "gemm.cl"), "-DTM=64 -DX=1.5 -DLO=-INFINITY -DMIN=(-2147483647-1) -DL=9L")]
    opencl.write_program_list(path, "train-a", keys)
    opencl.write_program_list(path, "train-b", keys[:1])
    assert opencl.read_program_list(path, "train-a") == keys
    assert opencl.read_program_list(path, "train-b") == keys[:1]
    assert opencl.read_program_list(path, "train-c") == [] and opencl.read_program_list(tmp_path / "no", "a") == []
    for text in ("{not json", "[1, 2]", '{"a": 3}', '{"a": [["elementwise.cl", "-DT=float"]]}',
                 '{"a": [[["../../etc/passwd"], "-DT=float"]]}', '{"a": [[["elementwise.cl"], "-Xclang -load"]]}',
                 '{"a": [[["elementwise.cl"], "-DT=float;rm"]]}', '{"a": [[[], "-DT=float"]]}'):
        path.write_text(text)
        assert opencl.read_program_list(path, "a") == [], text
    opencl.write_program_list(path, "a", keys)  # a corrupt file is replaced, not a crash
    assert opencl.read_program_list(path, "a") == keys


def test_prebuild_named_reads_this_devices_list_else_the_packages(tmp_path, monkeypatch):
    dev, builds = _fresh_device(monkeypatch, tmp_path)
    monkeypatch.setattr(Device, "prebuild", lambda self, keys, builders=(): len(keys))
    lists = importlib.resources.files("tfplus.kernels.opencl")
    assert opencl.read_program_list(lists / "programs-cpu.json", "train-mentee")  # shipped, and valid
    shipped = opencl.read_program_list(lists / f"programs-{'gpu' if dev.is_gpu else 'cpu'}.json", "train-mentee")
    before, after = (("elementwise.cl",), "-DT=float -DWANT_add=1"), (("nn.cl",), "-DT=float -DWANT_relu=1")
    dev.used = [before]  # asked for by something the process ran earlier: not the named work's
    assert dev.prebuild_named("train-mentee") == len(shipped)
    dev.used.append(after)
    opencl.record(SimpleNamespace(dev=dev), "train-mentee")
    assert opencl.read_program_list(dev.programs_path, "train-mentee") == [after]
    assert dev.prebuild_named("train-mentee") == 1 and dev.prebuild_named("train-nothing") == 0
    monkeypatch.setenv("TFPLUS_OPENCL_PREBUILD", "0")
    assert opencl.prebuild(None, "train-mentee") == 0


def test_compile_time_counts_overlapping_builds_once(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(build.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(build, "print", lambda *a, **k: None, raising=False)
    notice = build.CompileNotice()
    notice.start("d")       # t=0: one build
    now[0] = 1.0
    notice.start("d")       # t=1: two at once
    now[0] = 2.0
    notice.done()           # t=2
    now[0] = 3.0
    notice.done()           # t=3: none since
    now[0] = 10.0
    assert notice.count == 2 and notice.seconds == 3.0
    assert notice.summary() == "built 2 OpenCL programs (first run on this device): 3.0 s"


def test_a_build_thread_keeps_compiler_warnings_off_stderr(tmp_path, monkeypatch, capfd):
    dev, _ = _fresh_device(monkeypatch, tmp_path)
    capfd.readouterr()
    # Casting uchar compares it with -1: PoCL's compiler warns "always false" on fd 2, past any Python redirect.
    key = (("elementwise.cl",), f"-DT=uchar -DSFX=b8 -DIS_FLOAT=0 -DIS_SIGNED=0 -DWANT_cast_f32=1 -DN={os.getpid()}")
    dev._build(*key, background=True)
    assert "warning" not in capfd.readouterr().err
    assert len(list((tmp_path / "tfplus" / "opencl").glob("*.bin"))) == 1
    dev._build(*key)  # the main thread's build finds the same binary: -w is not in the digest
    assert dev.compiling.count == 1


def test_train_prebuilds_its_list_and_records_its_first_steps_programs(monkeypatch, capsys):
    from tfplus.cli import main
    monkeypatch.setattr(Device, "_all", {})  # a device that has built nothing in this process
    lists, started = {}, []
    monkeypatch.setattr(build, "read_program_list", lambda path, name: lists.get(name, []))
    monkeypatch.setattr(device, "write_program_list", lambda path, name, keys: lists.update({name: list(keys)}))
    monkeypatch.setattr(Device, "prebuild", lambda self, keys, builders=(): started.append(keys) or len(keys))
    argv = ["train", "--synthetic", "--model", "lenet", "--batch-size", "8", "--steps", "1", "--no-eval",
            "--device", "opencl"]
    assert main(argv) == 0
    dev = opencl.OpenCLRuntime().dev
    assert started == [[]] and lists["train-lenet"] == dev.used  # nothing listed yet; the first step's programs
    monkeypatch.setattr(Device, "_all", {})
    assert main(argv) == 0
    assert started[1] == dev.used  # the next run starts building them all
    capsys.readouterr()


def test_train_prebuilds_its_evaluation_s_programs_after_its_first_step_and_records_them(monkeypatch, capsys):
    """The evaluation's programs (other shapes: the test set's batches) are listed after a run's first
    evaluation, and the next run starts building them after its first step, while its first epoch trains."""
    from tfplus.cli import main
    monkeypatch.setattr(Device, "_all", {})
    lists, started = {}, []
    monkeypatch.setattr(build, "read_program_list", lambda path, name: lists.get(name, []))
    monkeypatch.setattr(device, "write_program_list", lambda path, name, keys: lists.update({name: list(keys)}))
    monkeypatch.setattr(Device, "prebuild", lambda self, keys, builders=(): started.append(keys) or len(keys))
    from tfplus import trainer
    from tfplus.kernels.opencl.elementwise import fill
    real = trainer.evaluate_predictions

    def evaluate(sess, *args, **kwargs):  # one program the training step does not use (on PoCL, whose tiles are
        fill(sess.runtime, sess.runtime.allocate((3,), np.float64), 1.0)  # fixed, the test batch's are the step's)
        return real(sess, *args, **kwargs)
    monkeypatch.setattr(trainer, "evaluate_predictions", evaluate)
    # One class: its hundred test images are one evaluation batch (all ten's thousand were 30 s on PoCL).
    argv = ["train", "--synthetic", "--model", "lenet", "--batch-size", "8", "--steps", "1", "--device", "opencl",
            "--classes", "0"]
    assert main(argv) == 0
    dev = opencl.OpenCLRuntime().dev
    train, evaluation = lists["train-lenet"], lists["eval-lenet"]
    assert started == [[], []] and evaluation and not set(evaluation) & set(train)
    assert train + evaluation == dev.used  # the first step's programs, then what the evaluation added
    assert any("-DT=double" in options for _, options in evaluation)
    monkeypatch.setattr(Device, "_all", {})
    assert main(argv) == 0
    assert started[2:] == [train, evaluation]
    capsys.readouterr()


def test_shipped_tuning_is_read_for_its_device_name_and_a_bad_file_is_ignored():
    from tfplus.runtime.opencl import parse_tuning
    good = json.dumps({"GPU A": {"gemm|float32|64x64x64|": [16, 64, 64, 4, 4]}, "GPU B": {}})
    assert parse_tuning(good, "GPU A") == ({"gemm|float32|64x64x64|": [16, 64, 64, 4, 4]}, "GPU A")
    assert parse_tuning(good, "GPU B") == ({}, None)
    for bad in ("not json", "[1, 2]", json.dumps({"GPU A": {"k": "__import__('os')"}}),
                json.dumps({"GPU A": {"k": [1.5]}}), json.dumps({"GPU A": {"k": []}}), json.dumps({"GPU A": [1]})):
        assert parse_tuning(bad, "GPU A") == ({}, None)


def test_a_gpu_with_no_shipped_tiles_borrows_those_of_its_vendor_s_nearest_name():
    """A fresh H200 takes the H100's tiles (the shipped program lists were recorded with them) instead of
    tuning during its first step; another vendor's tiles are never taken."""
    from tfplus.runtime.opencl import parse_tuning
    h100, a100 = {"gemm|float32|1x1x1|": [64, 64, 16, 4, 4]}, {"gemm|float32|1x1x1|": [32, 32, 16, 2, 2]}
    text = json.dumps({"NVIDIA H100 80GB HBM3": h100, "NVIDIA A100-SXM4-80GB": a100,
                       "AMD Radeon RX 7900 XTX": {"k": [1]}})
    assert parse_tuning(text, "NVIDIA H200") == (h100, "NVIDIA H100 80GB HBM3")
    assert parse_tuning(text, "NVIDIA A100 80GB PCIe") == (a100, "NVIDIA A100-SXM4-80GB")
    assert parse_tuning(text, "Intel(R) Arc(TM) A770 Graphics") == ({}, None)


def test_a_borrowed_tile_the_device_cannot_run_is_tuned_afresh(monkeypatch):
    monkeypatch.setenv("TFPLUS_OPENCL_TUNE_S", "inf")
    suffix = "|" + os.environ.get("TFPLUS_OPENCL_BUILD_OPTIONS", "")
    rt, tried = _gpu_runtime(), []
    big = (128, 128, 64, 8, 8)  # 64 * (128 + 128 + 2) * 4 bytes of local memory: more than this GPU's 48 KB
    rt.dev.tuning["gemm|a" + suffix] = list(big)
    assert not _tune.valid(big, rt.dev.max_wg, rt.info["local_mem_bytes"], 4)
    best = _tune.choose(rt, "gemm|a", 4, tried.append)
    assert tried and best != big and _tune.valid(best, rt.dev.max_wg, rt.info["local_mem_bytes"], 4)


def test_prebuild_soon_makes_the_device_that_a_runtime_made_meanwhile_shares(tmp_path, monkeypatch):
    """The context is made on prebuild_soon's thread while the caller goes on; a runtime made meanwhile waits
    for it instead of making a second one, and record() keeps what the caller used before the listing."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(Device, "_all", {})
    t = opencl.prebuild_soon(None, "nothing-listed")
    rt = opencl.OpenCLRuntime()
    t.join()
    assert list(Device._all.values()) == [rt.dev]
    assert rt.dev.listed_from == {"nothing-listed": 0}
