"""Data-parallel training over MPI or torch.distributed's gloo, shaped like Horovod's TensorFlow 1 API.

Each process (rank) of an `mpiexec -n N` job (`pip install 'tfplus[mpi]'`) or a `torchrun --nproc-per-node N` job
(`pip install 'tfplus[gloo]'`) builds the same graph, reads its own shard of every global batch and
runs the same steps; DistributedOptimizer averages the gradients over the ranks inside the step, so every rank
applies the same update and the variables stay equal. N ranks at batch B/N compute what one process computes at
batch B (a loss that averages over the batch), up to float rounding.

    import tfplus as tf
    import tfplus.distributed as dist

    dist.init()
    opt = dist.DistributedOptimizer(tf.train.MomentumOptimizer(0.01 * dist.size(), 0.9))
    train_op = opt.minimize(loss, global_step=tf.train.get_or_create_global_step())
    hooks = [dist.BroadcastGlobalVariablesHook(0)]
    ckpt = "runs/a" if dist.rank() == 0 else None          # rank 0 alone writes checkpoints
    with tf.train.MonitoredTrainingSession(checkpoint_dir=ckpt, hooks=hooks) as sess: ...

Why ops in the step and not a hook between two runs: the all-reduces are ops (tfplus/ops/collective_ops.py) with host
kernels on both devices, so a training step stays one Session.run (the planner plans it, the updates run in the
same step, nothing goes through Python feeds; on opencl a planned step replays its recorded launches) and the step
works unchanged on cpu and opencl. The gradients are grouped into buckets of about 4 MB (each bucket costs the
host a job, events and copies a step), whose all-reduces run on a communication thread while the backward pass
goes on (DistributedOptimizer).
The all-reduce ops take a bucket's gradients and give their sums, shaped as the variables, which the updates read
(no ConcatV2 or SplitV in the step: on opencl the kernels pack a bucket with one launch); a gradient's weight decay
term stays out of the all-reduce and is folded into the update, as in one process.
On an opencl GPU the host runs up to one step ahead of the sums: each bucket's copies back wait on the device for
an event the communication thread completes, so session.run returns once the step is queued
(kernels/opencl/collective.py; TFPLUS_ALLREDUCE_RUNAHEAD=0 makes the host wait for each sum, the default on a CPU
device).

The backend (init): under torchrun, or any launcher that sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (and
no MPI launcher's variables), gloo; else MPI; TFPLUS_DISTRIBUTED_BACKEND=mpi|gloo or init(backend=...) forces one.
Both go through tfplus.runtime.comm's interface; what only MPI has is its ranks' shared memory on one host
(TFPLUS_ALLREDUCE_SHM, kernels/opencl/collective.py): under gloo every bucket goes through gloo's all-reduce.

A failed rank ends the job: an exception that nothing catches calls MPI_Abort (init installs the hook, as
`python -m mpi4py` does), and mpiexec ends every rank when one dies, so the others never wait forever in a step;
under gloo the rank exits, torchrun's agent stops the others, and a rank waiting for the dead one in an all-reduce
gets gloo's error at once (its peer's connection closed). A rank that finishes normally while another waits in an
all-reduce it will never join (one ran a step more) ends the job with an error too (MPI: _watch_finished; gloo:
the finished rank's closed connections).
Every wait of the host for an all-reduce gives up after TFPLUS_ALLREDUCE_TIMEOUT seconds (default 300) with an
error naming the bucket, which ends the job: a rank that stalls without dying does not hang the others for ever.
"""
from __future__ import annotations

import atexit
import contextlib
import datetime
import math
import os
import signal
import sys
import threading
import time
import warnings

import numpy as np

from tfplus import dtypes
from tfplus.engine import signals
from tfplus.framework import (
    IndexedSlices,
    control_dependencies,
    convert_to_tensor,
    get_default_graph,
    name_scope,
    needed_ops,
)
from tfplus.ops import array_ops, control_flow_ops, math_ops, state_ops
from tfplus.ops.collective_ops import mpi_allreduce, mpi_allreduce_split
from tfplus.runtime import comm
from tfplus.train.monitored_session import SessionRunHook
from tfplus.train.optimizer import Optimizer, WrapperOptimizer
from tfplus.units import parse_size
from tfplus.variables import global_variables

__all__ = ["init", "backend", "launcher", "is_initialized", "LaunchError", "rank", "size", "local_rank", "local_size",
           "local_device", "cross_rank", "cross_size", "is_homogeneous", "mpi_built", "mpi_enabled",
           "mpi_threads_supported", "nccl_built", "gloo_built", "gloo_enabled", "cuda_built", "rocm_built", "join",
           "allreduce", "allgather", "broadcast", "Average", "Sum", "Adasum", "Compression", "DistributedOptimizer",
           "broadcast_variables", "broadcast_global_variables", "BroadcastGlobalVariablesHook", "max_over_ranks",
           "max_over_ranks_later", "barrier", "abort", "trace_mark"]

# Set by init: "world": the job's Comm (tfplus.runtime.comm), "local": (this host's rank, its ranks), "cross": (the
# rank among the ranks of this local rank, their number: Horovod's host rank and host count), "MPI": the mpi4py
# module under MPI, "calls": the collectives max_over_ranks and barrier made (_collectives_started).
_state: dict = {}

BACKENDS = ("mpi", "gloo")
# What torchrun (and torch.distributed's env:// start) sets: the gloo backend takes the job from them.
_TORCHRUN = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def init(backend: str | None = None) -> None:
    """Joins the job (once; later calls do nothing) through `backend`, "mpi" or "gloo" (default:
    $TFPLUS_DISTRIBUTED_BACKEND, else the launcher's: gloo under torchrun, MPI otherwise), and makes an uncaught
    exception end the whole job.

        >>> init()                 # mpiexec -n 2 python train.py, or torchrun --nproc-per-node 2 train.py
    """
    if _state:
        return
    name = _backend(backend)
    if name == "gloo":
        _init_gloo("init(backend='gloo')" if backend else "TFPLUS_DISTRIBUTED_BACKEND=gloo"
                   if os.environ.get("TFPLUS_DISTRIBUTED_BACKEND") else "under torchrun (RANK, WORLD_SIZE set)")
    else:
        _init_mpi()
    _take_back_stop_signals()
    _state["calls"] = 0
    if size() > 1:
        sys.excepthook = _abort_on_uncaught(sys.excepthook)
        if name == "mpi":
            _watch_finished(_state["MPI"].COMM_WORLD.Dup())
    if os.environ.get("TFPLUS_ALLREDUCE_TRACE", "") not in ("", "0"):  # the trace times session.run's parts too
        from tfplus.engine import step
        from tfplus.kernels.numpy.collective import reducer
        step.mark = reducer.mark


def backend() -> str:
    """The backend init() chose: "mpi" or "gloo"."""
    return _world().name


def launcher(n: int | str) -> str:
    """The command line that starts `n` ranks of this job's backend (MPI's by default), for messages.

        >>> launcher(2)            # under torchrun
        'torchrun --nproc-per-node 2 -m'
    """
    try:
        gloo = (_state["world"].name if _state else _backend(None)) == "gloo"
    except ValueError:  # a bad TFPLUS_DISTRIBUTED_BACKEND: init says so
        gloo = False
    return f"torchrun --nproc-per-node {n} -m" if gloo else f"mpiexec -n {n}"


def _backend(given: str | None) -> str:
    """The backend `given` (init's argument), else $TFPLUS_DISTRIBUTED_BACKEND's, else the launcher's: gloo where
    torchrun's variables are set and no MPI launcher's are, MPI otherwise."""
    what, value = ("init(backend=...)", given) if given is not None else \
        ("TFPLUS_DISTRIBUTED_BACKEND", os.environ.get("TFPLUS_DISTRIBUTED_BACKEND", ""))
    value = value.strip().lower()
    if value in BACKENDS:
        return value
    if value:
        raise ValueError(f"{what}={value!r}: give mpi (mpi4py, under mpiexec) or gloo (torch.distributed, under "
                         "torchrun), or leave it unset to follow the launcher")
    # Some of torchrun's variables (WORLD_SIZE=2 set by hand, say) pick gloo too, whose start then names the missing
    # ones: MPI would run this process alone, a world of one training the whole job.
    torchrun = any(v in os.environ for v in _TORCHRUN) and not any(v in os.environ for v in _LAUNCHER_SIZES)
    return "gloo" if torchrun else "mpi"


def _init_gloo(why: str) -> None:
    """Joins the job as torch.distributed's env:// start does (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), in a
    gloo process group whose collectives give up after TFPLUS_ALLREDUCE_TIMEOUT seconds; with none of them set, a
    world of one (as MPI without mpiexec)."""
    from tfplus.kernels.numpy.collective import allreduce_timeout
    try:
        import torch.distributed as tdist
    except ImportError as e:
        raise ImportError(f"{why}: the gloo backend needs torch ({e}): pip install \"tfplus[gloo]\", or "
                          "TFPLUS_DISTRIBUTED_BACKEND=mpi under mpiexec") from None
    timeout = allreduce_timeout()
    missing = [v for v in _TORCHRUN if v not in os.environ]
    if not tdist.is_initialized():
        if len(missing) == len(_TORCHRUN):
            tdist.init_process_group("gloo", store=tdist.HashStore(), rank=0, world_size=1,
                                     timeout=datetime.timedelta(seconds=timeout))
        elif missing:
            raise LaunchError(f"{why}: the gloo backend takes the job from {', '.join(_TORCHRUN)}, and "
                              f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} unset: start the ranks "
                              "with torchrun --nproc-per-node N (--nnodes, --rdzv-endpoint across hosts)")
        else:
            tdist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout))
        atexit.register(tdist.destroy_process_group)  # NOTE: before the reducer's drain: it runs after it
    world = comm.GlooComm(None, timeout)
    comm.set_world(world)
    # torchrun sets both; another launcher that does not runs every rank on one host
    _state["local"] = (int(os.environ.get("LOCAL_RANK", world.rank)),
                       int(os.environ.get("LOCAL_WORLD_SIZE", world.size)))
    hosts = max(world.size // _state["local"][1], 1)
    _state["cross"] = (int(os.environ.get("GROUP_RANK", world.rank // _state["local"][1])), hosts)
    _state["world"] = world


def _init_mpi() -> None:
    with _ended_if_mpi_hangs():
        try:
            from mpi4py import MPI
        except ImportError as e:
            raise ImportError(f"tfplus.distributed needs mpi4py and an MPI library ({e}): "
                              "pip install 'tfplus[mpi]' (mpi4py and the mpich wheel, which brings mpiexec)") from None
        except RuntimeError as e:  # NOTE: mpi4py alone (pip install mpi4py) finds no libmpi and raises this
            raise ImportError(f"tfplus.distributed: mpi4py is installed but found no MPI library ({e}); pip install "
                              "'tfplus[mpi]' brings one (the mpich wheel, with mpiexec), or install a system "
                              "MPI") from None
        _check_not_alone(MPI)
        _state["MPI"] = MPI
        local = _host_comm(MPI, _split_shared(MPI))
        cross = MPI.COMM_WORLD.Split(local.Get_rank(), MPI.COMM_WORLD.Get_rank())
        _state["local"] = (local.Get_rank(), local.Get_size())
        _state["cross"] = (cross.Get_rank(), cross.Get_size())
        _state["world"] = comm.MpiComm(MPI.COMM_WORLD)
        comm.set_world(_state["world"])


def _take_back_stop_signals() -> None:
    """Puts Python's handlers of the stop signals back in the OS: the MPI library's start takes SIGHUP's action (the
    mpich wheel's, with UCX: Python's handler, still reported by signal.getsignal, never ran), so a SIGHUP to a rank
    between MPI's start and the trainer's own stop (the graph, the data, the session's start: seconds) was lost and
    the run went on to its end."""
    if threading.current_thread() is not threading.main_thread():  # (where Python runs handlers, and sets them)
        return
    for s in signals.STOPS:
        handler = signal.getsignal(s)
        if callable(handler):
            signal.signal(s, handler)


class LaunchError(RuntimeError):
    """This process and the MPI library mpi4py loaded disagree on the job it belongs to."""


# What launchers set to the number of processes they started: MPICH's and Intel MPI's hydra and Slurm's PMI (PMI_SIZE),
# Open MPI (OMPI_COMM_WORLD_SIZE), MVAPICH (MV2_COMM_WORLD_SIZE).
_LAUNCHER_SIZES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


def _check_not_alone(MPI) -> None:
    """Refuses a process its launcher started as one of N that MPI runs alone (a world of 1): mpi4py loaded another
    MPI library than the launcher's (a system Open MPI under the mpich wheel's mpiexec, say), so every process would
    train the whole run by itself as rank 0, on the first GPU, into the same checkpoints. mpi4py only warns of it."""
    if MPI.COMM_WORLD.Get_size() != 1:
        return
    for var in _LAUNCHER_SIZES:
        n = os.environ.get(var, "")
        if n.isdigit() and int(n) > 1:
            lib = MPI.Get_library_version().strip().splitlines()[0].strip()
            raise LaunchError(
                f"this process was started as one of {n} ({var}={n}), but MPI runs it alone: mpi4py loaded "
                f"'{lib}', not the MPI of the mpiexec that started it, so each process would train the whole run as "
                "rank 0 into the same checkpoints. Start the job with that MPI's own mpiexec (for the mpich wheel of "
                "tfplus[mpi]: the mpiexec installed beside mpi4py), or point mpi4py at the launcher's library: "
                "MPI4PY_LIBMPI=/path/to/libmpi.so")


def _split_shared(MPI):
    """The ranks that share this rank's memory, as MPI sees them (MPI_COMM_TYPE_SHARED)."""
    return MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)


def _host_comm(MPI, shared):
    """The communicator of this host's ranks (local_rank picks the device by it): `shared`, unless its sizes
    disagree with the ranks' host names (a shared-memory split that gave each rank a group of its own would put
    every rank of a host on its first GPU); then the ranks grouped by host name, with a warning."""
    world = MPI.COMM_WORLD
    hosts = world.allgather(MPI.Get_processor_name())
    sizes = world.allgather(shared.Get_size())
    if all(n == hosts.count(h) for h, n in zip(hosts, sizes)):
        return shared
    if world.Get_rank() == 0:
        warnings.warn(f"tfplus.distributed: MPI's shared-memory split made groups of {sizes} ranks, but the ranks' "
                      f"host names group them as {[hosts.count(h) for h in hosts]}: local_rank() and the device "
                      "each rank takes follow the host names", RuntimeWarning, stacklevel=3)
    shared.Free()
    return world.Split(hosts.index(hosts[world.Get_rank()]), world.Get_rank())


@contextlib.contextmanager
def _ended_if_mpi_hangs():
    """Inside, MPI starts: a rank that ended before it started MPI (Ctrl-C while it imported tfplus) left the others
    in MPI_Init for ever, spinning in C with Python's lock held, where no Python handler or thread runs (MPICH's
    mpiexec ends a job when a rank that started MPI dies, not one that never did). On a host whose ranks MPICH's
    proxy started, a forked watcher (_watch_start) ends this rank within about a second of another rank's end, saying
    so; elsewhere (another launcher; a rank of another host), an alarm after TFPLUS_ALLREDUCE_TIMEOUT seconds, whose
    default action the kernel takes, ends this rank then, and mpiexec the job. (Main thread, SIGALRM not taken:
    else no alarm.)"""
    from tfplus.kernels.numpy.collective import allreduce_timeout
    armed = hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread() and \
        signal.getsignal(signal.SIGALRM) == signal.SIG_DFL
    earlier = signal.alarm(math.ceil(allreduce_timeout())) if armed else 0
    watcher = _watch_start()
    try:
        yield
    finally:
        if watcher:
            os.kill(watcher, signal.SIGKILL)
            os.waitpid(watcher, 0)
        if armed:
            signal.alarm(earlier)


def _watch_start() -> int | None:
    """Forks a process that kills this one, saying why, when one of this host's ranks has ended before this one's
    MPI start returned (a forked process: while MPI starts, no thread of this one runs). The ranks of a host are
    the children of MPICH's proxy (hydra_pmi_proxy), MPI_LOCALNRANKS of them; the watcher's pid, or None where
    that cannot be read (another launcher, no /proc)."""
    proxy, expected = os.getppid(), os.environ.get("MPI_LOCALNRANKS", "")
    try:
        with open(f"/proc/{proxy}/comm") as f:
            by_proxy = f.read().strip() == "hydra_pmi_proxy"
    except OSError:
        return None
    if not (by_proxy and expected.isdigit() and int(expected) > 1 and _live_children(proxy) is not None):
        return None
    me = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    try:  # NOTE: the child runs no Python cleanup of the parent's (os._exit) and takes no lock a thread may hold
        _watch(me, proxy, int(expected), os.environ.get("PMI_RANK", "?"))
    finally:
        os._exit(0)


def _watch(me: int, proxy: int, expected: int, rank_: str) -> None:
    short_since = None
    while os.getppid() == me:  # this rank alive (else the watcher is an orphan)
        alive = _live_children(proxy)
        if alive is None or alive >= expected:
            short_since = None
        elif short_since is None:  # seen for a second: a rank being started is no reason
            short_since = time.monotonic()
        elif time.monotonic() - short_since > 1.0:
            os.write(2, (f"tfplus.distributed: rank {rank_} is starting MPI, but {expected - alive} of this host's "
                         f"{expected} ranks ended before they started it (stopped as they started?), and MPI would "
                         "wait for them for ever: ending this rank, and mpiexec the job\n").encode())
            time.sleep(0.5)  # NOTE: mpiexec's proxy forwards the line at its own pace; the kill may cut it off
            os.kill(me, signal.SIGKILL)
            return
        time.sleep(0.2)


def _live_children(pid: int) -> int | None:
    """How many children process `pid` has that have not ended (Linux's /proc), or None where it cannot say."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = f.read().split()
    except OSError:
        return None
    alive = 0
    for child in children:
        try:
            with open(f"/proc/{child}/stat") as f:
                alive += f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
        except OSError:  # reaped meanwhile
            continue
    return alive


def _abort_on_uncaught(previous):
    def hook(kind, value, tb):
        previous(kind, value, tb)
        # mpiexec ends every rank at the abort and may drop what its proxy has not yet forwarded of this one's
        # stderr: the error naming the rank and what failed came out cut off (seen under load). Let it arrive.
        sys.stderr.flush()
        time.sleep(0.5)
        # NOTE: a rank that exited normally would wait in MPI_Finalize while the others wait in the step's allreduce.
        abort(1)
    return hook


_FINISHED = 36  # the tag of a rank's notice that it finished, on the communicator _watch_finished dups


def _collectives_started() -> int:
    """The collectives this process started: the ops' all-reduces, max_over_ranks's and barrier's."""
    collective = sys.modules.get("tfplus.kernels.numpy.collective")  # not loaded: no op started one
    return _state["calls"] + (collective.reducer.count if collective else 0)


def _watch_finished(comm) -> None:
    """Ends the job with an error when a rank waits in a collective that another rank, finished, never joins
    (one ran a step more than the other), instead of waiting for ever: each rank that exits normally tells the
    others how many collectives it started; a thread of each rank compares its own count with the finished ranks'
    until it finishes too (Horovod's "one of the ranks finished execution")."""
    MPI, me = _state["MPI"], comm.Get_rank()
    done: dict[int, int] = {}  # finished rank -> the collectives it started

    def receive() -> tuple[int, int]:
        buf, status = np.zeros(1, np.int64), MPI.Status()
        comm.Recv(buf, source=MPI.ANY_SOURCE, tag=_FINISHED, status=status)
        return status.Get_source(), int(buf[0])

    def watch() -> None:
        while True:
            source, count = receive()
            if source == me:  # this rank's own exit
                return
            done[source] = count
            while not comm.Iprobe(source=MPI.ANY_SOURCE, tag=_FINISHED):
                mine = _collectives_started()
                for rank_, theirs in done.items():
                    if mine > theirs:
                        print(f"tfplus.distributed: rank {me} started collective {mine}, but rank {rank_} finished "
                              f"after {theirs}: every rank must run the same steps (the same Session.run calls of "
                              "the distributed ops, e.g. as many batches each); ending the job", file=sys.stderr)
                        sys.stderr.flush()
                        time.sleep(1)  # NOTE: mpiexec forwards output on its own pace; MPI_Abort may cut it off
                        abort(1)
                time.sleep(0.2)

    watcher = threading.Thread(target=watch, name="tfplus-finished-watch", daemon=True)
    watcher.start()

    def say_finished() -> None:
        notice = np.array([_collectives_started()], np.int64)
        sent = [comm.Isend(notice, dest=r, tag=_FINISHED) for r in range(comm.Get_size())]  # itself too: the watch ends
        watcher.join()
        while len(done) < comm.Get_size() - 1:  # as MPI_Finalize would, wait for the others to finish
            source, count = receive()
            done[source] = count
        MPI.Request.Waitall(sent)
    atexit.register(say_finished)


def is_initialized() -> bool:
    """Whether init() was called in this process."""
    return bool(_state)


def _world():
    if not _state:
        raise RuntimeError("call tfplus.distributed.init() before rank(), size() or building distributed ops")
    return _state["world"]


def rank() -> int:
    """This process's rank in the job, 0 .. size()-1."""
    return _world().rank


def size() -> int:
    """The number of processes in the job."""
    return _world().size


def local_rank() -> int:
    """This process's rank among the job's processes on this host (which device or cores it takes)."""
    _world()
    return _state["local"][0]


def local_size() -> int:
    """The number of the job's processes on this host."""
    _world()
    return _state["local"][1]


def cross_rank() -> int:
    """This host's rank among the job's hosts (Horovod's: the rank among the ranks of this local rank)."""
    _world()
    return _state["cross"][0]


def cross_size() -> int:
    """The number of hosts that run a rank of this local rank (the hosts, where each runs as many ranks)."""
    _world()
    return _state["cross"][1]


def is_homogeneous() -> bool:
    """Whether every host runs as many ranks."""
    sizes = np.array([local_size(), -local_size()], dtype=np.int64)
    _world().allreduce(sizes, comm.MAX)  # the largest and (negated) the smallest host
    return sizes[0] == -sizes[1]


# What Horovod's scripts ask of its build: the collectives are MPI's (mpi4py) or gloo's (torch.distributed), on
# the host.
def mpi_built() -> bool:
    """True: MPI is a backend (the `mpi` extra)."""
    return True


def mpi_enabled() -> bool:
    """Whether this job's collectives run on MPI."""
    return backend() == "mpi"


def mpi_threads_supported() -> bool:
    """Whether the MPI library runs calls from several threads at once (MPI_THREAD_MULTIPLE); False under gloo."""
    if not mpi_enabled():
        return False
    MPI = _state["MPI"]
    return MPI.Query_thread() == MPI.THREAD_MULTIPLE


def nccl_built() -> bool:
    """False: NCCL cannot take OpenCL buffers; the GPUs' sums go through the host or shared memory."""
    return False


def gloo_built() -> bool:
    """True: torch.distributed's gloo is a backend (the `gloo` extra)."""
    return True


def gloo_enabled() -> bool:
    """Whether this job's collectives run on gloo (under torchrun)."""
    return backend() == "gloo"


def cuda_built() -> bool:
    """False: the devices are OpenCL's."""
    return False


def rocm_built() -> bool:
    """False: the devices are OpenCL's."""
    return False


def join() -> int:
    """Horovod's join (a rank out of data joins the others' all-reduces with zeros) is refused: every rank here must
    run the same steps, and a rank that runs fewer ends the job with an error naming both."""
    _world()
    raise NotImplementedError(
        f"tfplus.distributed.join() on rank {rank()}: a rank that ran out of batches cannot join the others' "
        "all-reduces; give every rank the same number of steps instead (e.g. Dataset.shard(size(), rank()) of a "
        "dataset whose length divides by size(), or each rank the smallest shard's count of batches)")


def local_device() -> str:
    """The OpenCL device this rank takes, one per process: "opencl:K" for this host's K-th GPU by local rank, its
    CPU devices (PoCL) that can build kernels counted only where it has no GPU (they may be listed first). With
    more ranks on a host than devices, the ranks share them in turn, and a warning says so (one PoCL device: every
    rank's).

        >>> sess = tf.Session(device=local_device())      # Horovod's visible_device_list = str(local_rank())
    """
    from tfplus.runtime.opencl.discovery import build_error, cl, cl_devices  # NOTE: only an opencl rank loads it
    devices = cl_devices()
    if not devices:
        return "opencl"  # the session's own error names the missing driver
    gpus = [i for i, d in enumerate(devices) if d.type & cl.device_type.GPU]
    # CPU devices whose compiler works (a PoCL older than the CPU builds nothing); none: the session's error says why
    candidates = gpus or [i for i, d in enumerate(devices) if build_error(d) is None] or [0]
    if local_size() > len(candidates):
        warnings.warn(f"tfplus.distributed: {local_size()} ranks on this host share its {len(candidates)} OpenCL "
                      f"{'GPU' if gpus else 'device'}(s); start at most {len(candidates)} ranks per host for one "
                      "device each", RuntimeWarning, stacklevel=2)
    return f"opencl:{candidates[local_rank() % len(candidates)]}"


def max_over_ranks(value: int) -> int:
    """The largest `value` that any rank passes, now, in Python (every rank must call it): e.g. whether any rank
    was asked to stop."""
    buf = np.array([value], np.int64)
    world = _world()
    _settle()
    _state["calls"] += 1
    world.allreduce(buf, comm.MAX)
    return int(buf[0])


def max_over_ranks_later(value: int):
    """max_over_ranks without waiting: returns a function that waits for the result and gives it. The exchange runs
    on the communication thread of the gradients' all-reduces, in its turn (every rank must start the same ones in
    the same order among the steps' all-reduces). Started before a step and read after it, it costs the host's path
    between steps nothing.

        >>> result = max_over_ranks_later(stop_wanted); sess.run(train_op); stop = result()
    """
    _world()
    from tfplus.kernels.numpy.collective import reducer  # NOTE: here: the kernels load when a step runs
    return reducer.largest(value)


def trace_mark(label: str) -> None:
    """With TFPLUS_ALLREDUCE_TRACE=1, notes that the host reached `label`: each rank's report at exit times the
    host's path between a step's last all-reduce wait and the next step's first start through the labels noted."""
    from tfplus.kernels.numpy.collective import reducer  # NOTE: here: the kernels load when a step runs
    reducer.mark(label)


def barrier() -> None:
    """Returns once every rank has called it."""
    world = _world()
    _settle()
    _state["calls"] += 1
    world.barrier()


def _settle() -> None:
    """Before a blocking collective on this thread: finishes the all-reduces the main thread moves on (Reducer.settle),
    which another rank may be waiting for."""
    collective = sys.modules.get("tfplus.kernels.numpy.collective")
    if collective is not None:
        collective.reducer.settle()


def abort(code: int = 1) -> None:
    """Ends every rank of the job now (MPI_Abort; under gloo this rank, and torchrun the others): what a rank that
    cannot go on calls, so none waits for it."""
    sys.stderr.flush()
    _world().abort(code)


# Horovod's reduction names, for allreduce(op=...). Adasum is named so that a script asking for it gets an error
# that says why (_check_op), not an AttributeError.
Average, Sum, Adasum = "average", "sum", "adasum"


def _check_op(op: str, what: str) -> None:
    if op == Adasum:
        raise NotImplementedError(f"{what} op=Adasum: tfplus's all-reduce adds the ranks' tensors; it has no "
                                  "Adasum (Horovod builds it only with its Adasum support): use "
                                  "tfplus.distributed.Average, with the learning rate scaled by size()")
    if op not in (Average, Sum):
        raise ValueError(f"{what} op {op!r}: use tfplus.distributed.Average or Sum")


class Compression:
    """Horovod's gradient compression choices, for DistributedOptimizer(compression=...): `none` only (the
    all-reduce kernels take float32 and float64; `fp16` is refused, naming this)."""
    none = "none"
    fp16 = "fp16"


def _carrier(dtype):
    """The dtype a tensor of `dtype` travels in through the all-reduce kernels (float32 and float64 only): itself,
    or float64 (an integer up to 2**53 and a bool survive the round trip unchanged)."""
    return dtype if dtype in (dtypes.float32, dtypes.float64) else dtypes.float64


def _reduce(tensor):
    """The elementwise sum of `tensor` over the ranks, in the carrier dtype (_carrier)."""
    carrier = _carrier(tensor.dtype.base_dtype)
    return mpi_allreduce(tensor if carrier == tensor.dtype.base_dtype else math_ops.cast(tensor, carrier))


def allreduce(tensor, average: bool = True, name: str | None = None, op: str | None = None):
    """`tensor` summed (or averaged) over the ranks, computed when the step runs (the MpiAllreduce op). `op`,
    Average or Sum, is Horovod's newer spelling of `average` and overrides it. An integer tensor's sum keeps its
    dtype; its average is float64, as TensorFlow's `/` of integers gives (Horovod's).

        >>> total = allreduce(count, op=Sum)
    """
    if op is not None:
        _check_op(op, "allreduce")
        average = op == Average
    n = size()
    with name_scope(name, "DistributedAllreduce"):
        tensor = convert_to_tensor(tensor)
        dtype = tensor.dtype.base_dtype
        total = _reduce(tensor)
        if average:
            total = total * (1.0 / n) if n > 1 else total
            if not dtype.is_floating:  # an integer's average is float64, as TensorFlow's / of integers
                return total
        return total if total.dtype.base_dtype == dtype else math_ops.cast(total, dtype)


def broadcast(tensor, root_rank: int, name: str | None = None):
    """Rank `root_rank`'s value of `tensor`, on every rank, when the step runs (Horovod's): every rank must run
    it; the others' values are not read, but their shapes must equal root's.

        >>> w0 = broadcast(w, 0)
    """
    _check_root(root_rank)
    with name_scope(name, "DistributedBroadcast"):
        tensor = convert_to_tensor(tensor)
        dtype = tensor.dtype.base_dtype
        carrier = _carrier(dtype)
        # root's value plus every other rank's zeros: x + 0 is x exactly
        # (zeros of the carrier dtype: a float16 ZerosLike has no OpenCL kernel)
        value = math_ops.cast(tensor, carrier) if rank() == root_rank else \
            array_ops.zeros(array_ops.shape(tensor), carrier)
        total = mpi_allreduce(value)
        return total if carrier == dtype else math_ops.cast(total, dtype)


def allgather(tensor, name: str | None = None):
    """The ranks' `tensor`s concatenated along the first dimension, rank 0's first, on every rank, when the step
    runs (Horovod's): the first dimension may differ from rank to rank (a shard's last, shorter batch), the others
    must not. Two all-reduces: of the ranks' first dimensions, then of a buffer of all the rows in which each rank
    fills its own.

        >>> every_prediction = allgather(predictions)
    """
    return _allgather(tensor, name, same_rows=False)


def _allgather(tensor, name: str | None, same_rows: bool):
    """allgather; `same_rows`: a first dimension the graph knows is every rank's (checked when the step runs), so
    the result's shape is known too: a step under a memory_budget is planned from shapes (a sparse gradient's
    gathered rows in DistributedOptimizer). A script's own gather keeps Horovod's rule: the ranks' first dimensions
    may differ even where each graph knows its own (constants of r + 1 rows on rank r)."""
    n, me = size(), rank()
    with name_scope(name, "DistributedAllgather"):
        tensor = convert_to_tensor(tensor)
        dtype = tensor.dtype.base_dtype
        if tensor.get_shape().ndims in (None, 0):
            raise ValueError(f"allgather: {tensor.name} has shape {tensor.get_shape()}; it concatenates along the "
                             "first dimension, so give a tensor of rank 1 or more (a scalar: reshape it to [1])")
        rows = math_ops.cast(array_ops.shape(tensor)[0], dtypes.float64)
        sizes = math_ops.cast(mpi_allreduce(rows * np.eye(n)[me]), dtypes.int32)  # rank r's row count at r
        ndims, known = tensor.get_shape().ndims, tensor.get_shape().as_list()[0]
        carrier = _carrier(dtype)
        value = tensor if carrier == dtype else math_ops.cast(tensor, carrier)
        if known is None or not same_rows:
            before = math_ops.reduce_sum(sizes[:me]) if me else array_ops.zeros([], dtypes.int32)
            after = math_ops.reduce_sum(sizes) - before - sizes[me]
            edges = array_ops.stack([array_ops.stack([before, after])] + [array_ops.zeros([2], dtypes.int32)] *
                                    (ndims - 1))
        else:
            # The ranks' sizes check that every rank has the rows this graph knows.
            # NOTE: the sizes alone as data: a string tensor (a message) cannot be planned into a budget's arena
            check = control_flow_ops.Assert(math_ops.reduce_all(math_ops.equal(sizes, known)), [sizes],
                                            name="rows_equal_on_every_rank__else_a_None_first_dimension")
            with control_dependencies([check]):
                value = array_ops.identity(value)
            edges = np.array([[me * known, (n - 1 - me) * known]] + [[0, 0]] * (ndims - 1), np.int32)
        total = mpi_allreduce(array_ops.pad(value, edges))
        return total if carrier == dtype else math_ops.cast(total, dtype)


class DistributedOptimizer(WrapperOptimizer):
    """Wraps `optimizer`: compute_gradients averages the gradients over the ranks (`op=Sum`: adds them, for a loss
    each rank divides by the global batch's size); apply_gradients and the slots are `optimizer`'s.

    The gradients are grouped into buckets of about `bucket_bytes` (default $TFPLUS_ALLREDUCE_BUCKET, else 4 MB), from
    the last layer's to the first's, the order the backward pass computes them in; MpiAllreduceStart takes a
    bucket's gradients and MpiAllreduceWait gives their sums (one flat buffer on the host; on opencl one packing
    launch and one copy each way). With `op=Average` a gradient that is weight decay's AddN(Mul(w, wd), g) has only g
    all-reduced, and wd * w is added to the average: the same update (w is equal on every rank), whose sum the graph
    rewrite folds into the fused update (_FusedApply) as it does in one process (a reduced decay cost a Mentee step
    16 more kernels). Each bucket's all-reduce starts as soon as its gradients are computed, before the backward
    pass goes on to the earlier layers, and runs on the communication thread while it does; the step waits for the
    sums only once every bucket has started, just before the updates (Horovod's and PyTorch DDP's overlap). 0: one
    buffer of all the gradients, all-reduced after the whole backward pass (MpiAllreduce), the step waiting.

    A schedule of sizes, such as "4KB,64KB,1MB", cuts the buckets from the first layer's gradients instead: the
    first bucket holds at most 4 KB, the next at most 64 KB, each after them at most 1 MB (a variable larger than
    its bucket's size is a bucket alone). The first layers' gradients come last in the backward pass, and their
    bucket's all-reduce is the one the step waits for with nothing left to overlap: a small one is short.

    The gradients of tf.gather and embedding_lookup (IndexedSlices) stay sparse, as Horovod's by default: the
    ranks' rows and their indices are gathered (allgather; averaged, each rank's rows are divided by size()), and
    the wrapped optimizer updates only the rows some rank looked up, as one process at the global batch does.
    `sparse_as_dense=True` makes them dense before they are packed (every row moves, with Momentum's or Adam's
    slots: as under Horovod), which pays when most rows are looked up every step.

    Horovod's other arguments: `compression=Compression.fp16` is refused (Compression); `device_dense`,
    `device_sparse`, `num_groups` and `groups` are accepted and change nothing (the sums are made where the
    all-reduce kernels make them; the buckets are bucket_bytes'); `gradient_predivide_factor` (op=Average only)
    divides before and multiplies after the sum, the same average; `backward_passes_per_step` > 1 is refused,
    naming what to do instead.

    In a world of one (`mpiexec -n 1`, or no mpiexec) the gradients are the sums: no all-reduce is built, and the
    step is the one process's (TFPLUS_ALLREDUCE_ALONE=1 builds them anyway, to measure them).

        >>> opt = DistributedOptimizer(tf.train.GradientDescentOptimizer(0.1))  # after init()
    """

    def __init__(self, optimizer: Optimizer, name: str | None = None, use_locking: bool = False,
                 device_dense: str = "", device_sparse: str = "", compression: str = Compression.none,
                 sparse_as_dense: bool = False, backward_passes_per_step: int = 1, op: str = Average,
                 gradient_predivide_factor: float = 1.0, average_aggregated_gradients: bool = False,
                 num_groups: int = 0, groups=None, bucket_bytes: int | str | tuple[int, ...] | None = None):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"DistributedOptimizer wraps a tf.train.Optimizer, not {optimizer!r}")
        size()  # refuses before init()
        _check_op(op, "DistributedOptimizer")
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError(f"DistributedOptimizer gradient_predivide_factor={gradient_predivide_factor} with "
                             f"op={op!r}: it divides an average's terms; give op=Average or leave it 1.0")
        if compression != Compression.none:
            # NOTE: float16 rounding alone would save no bandwidth, and the OpenCL kernels have no float16 casts
            raise NotImplementedError(f"DistributedOptimizer compression={compression!r}: the all-reduce kernels "
                                      "take float32 and float64 only; use Compression.none")
        if backward_passes_per_step != 1:
            # NOTE: the update of every k-th step would sit in a tf.cond branch, which holds no variable updates here
            raise NotImplementedError(
                f"DistributedOptimizer backward_passes_per_step={backward_passes_per_step}: local gradient "
                "accumulation is not supported; feed each rank a batch that many times larger instead, and give the "
                "Session a memory_budget if it does not fit: the planner splits the batch into micro-batches and "
                "accumulates their gradients within the step (the same update, one all-reduce)")
        super().__init__(optimizer, use_locking, name or f"Distributed{optimizer.get_name()}")
        self._op, self._sparse_as_dense = op, sparse_as_dense
        if bucket_bytes is None:
            bucket_bytes = os.environ.get("TFPLUS_ALLREDUCE_BUCKET") or BUCKET_BYTES
            what = "TFPLUS_ALLREDUCE_BUCKET"
        else:
            what = "DistributedOptimizer(bucket_bytes=...)"
        self.bucket_bytes = _bucket_sizes(bucket_bytes, what)

    def compute_gradients(self, *args, **kwargs) -> list[tuple]:
        pairs = [(g if g is None or (isinstance(g, IndexedSlices) and not self._sparse_as_dense)
                  else convert_to_tensor(g), v)  # densifies IndexedSlices with sparse_as_dense
                 for g, v in self._optimizer.compute_gradients(*args, **kwargs)]
        if size() == 1 and not _reduce_alone():
            return pairs
        live = [(g, v) for g, v in pairs if g is not None and not isinstance(g, IndexedSlices)]
        with name_scope(f"{self._name}_Allreduce"):
            averaged = {v: self._gather(g) for g, v in pairs if isinstance(g, IndexedSlices)}
            averaged.update(self._reduce_dense(live) if live else {})
        return [(averaged.get(v), v) for _, v in pairs]

    def _gather(self, g: IndexedSlices) -> IndexedSlices:
        """A sparse gradient's rows and indices from every rank (Horovod's allgather of IndexedSlices)."""
        values = _allgather(g.values, None, same_rows=True)
        return IndexedSlices(values * (1.0 / size()) if self._op == Average else values,
                             _allgather(g.indices, None, same_rows=True),
                             g.dense_shape)

    def _reduce_dense(self, live: list) -> dict:
        """{variable: its gradient summed or averaged over the ranks} for the dense (gradient, variable) pairs."""
        # One buffer holds one dtype: the gradients of each dtype (a float64 variable's beside float32 ones) are
        # packed apart, the most common dtype's first.
        by_dtype: dict = {}
        for g, v in live:
            by_dtype.setdefault(g.dtype.base_dtype, []).append((g, v))
        groups = sorted(by_dtype.values(), key=len, reverse=True)
        averaged = {}
        if self.bucket_bytes == 0:
            for group in groups:
                averaged.update(_unpack(allreduce(_pack(group), op=self._op), group))
            return averaged
        average = self._op == Average
        scale = 1.0 / size() if average else 1.0
        buckets = [b for group in groups for b in _buckets(group, self.bucket_bytes)]
        starts, waits = [], []
        for i, bucket in enumerate(buckets):
            # the average of g + wd * w over the ranks is average(g) + wd * w (w is the same on every rank): the
            # decay's term stays out of the bucket, where the graph rewrite folds it into the update
            decays = [_decay(g, v) if average else None for g, v in bucket]
            grads = [g if d is None else d[0] for (g, _), d in zip(bucket, decays)]
            dtype = grads[0].dtype.base_dtype
            carrier = _carrier(dtype)  # float16's in float64: the all-reduce kernels take float32 and float64
            start, sums = mpi_allreduce_split([g if carrier == dtype else math_ops.cast(g, carrier) for g in grads],
                                              scale, name=f"bucket{i}")
            if starts:  # the communication thread reduces in the order they start: the same on every rank
                start._add_control_input(starts[-1])
            starts.append(start)
            waits.append(sums[0].op)
            sums = [s if carrier == dtype else math_ops.cast(s, dtype) for s in sums]
            averaged.update((v, s if d is None else math_ops.add_n([d[1], s]))
                            for (_, v), s, d in zip(bucket, sums, decays))
        for wait in waits:  # none blocks before every bucket is on its way
            wait._add_control_input(starts[-1])
        _start_early(starts, buckets)
        return averaged


def _decay(g, v) -> tuple | None:
    """(the gradient less weight decay's term, the term) when gradient `g` of variable `v` is AddN(Mul(v, wd),
    gradient) that nothing else reads (engine.rewrite.decay_term), else None."""
    from tfplus.engine.rewrite import decay_term
    var = getattr(v, "_variable", None)
    if var is None or g.consumers() or g.op.control_inputs:
        return None
    found = decay_term(g, var, lambda t, reader: t.consumers() == [reader] and not t.op.control_inputs)
    return None if found is None else (found[0], found[2][1].outputs[0])


def _reduce_alone() -> bool:
    """Whether a world of one builds its all-reduces anyway (TFPLUS_ALLREDUCE_ALONE=1): a sum over one rank is the
    gradient itself, so by default DistributedOptimizer builds none there, and the step is the one process's (on
    an H200 the buckets' copies out and back, the communication thread and the host's waits took a one-rank step
    from 1.5 to 3.1-3.4 ms: BENCHMARKS.md, stop 50). Set, one process shows what the buckets' machinery costs and
    where it sits in the step (benchmarks/bench_distributed.py --ranks 1d)."""
    return os.environ.get("TFPLUS_ALLREDUCE_ALONE", "0") not in ("", "0")


# Gradient bytes per all-reduce bucket by default. Each bucket costs each rank's host a job, events and copies a
# step, and a replayed GPU step is host-bound: on two H200s, Mentee's ~2.8 MB of gradients in 4 MB buckets trained at
# 1.22-1.24x one GPU's images/s, in the five buckets of "4KB,64KB,1MB" at 0.90-0.99x (BENCHMARKS.md, stop 51). Larger
# models still overlap their all-reduces with the backward pass (PyTorch DDP's default is 25 MB, Horovod's 64 MB).
BUCKET_BYTES = 4 << 20


def _bucket_sizes(spec: int | str | tuple, what: str) -> int | tuple[int, ...]:
    """A bucket size in bytes (0: no buckets), or a schedule of sizes from the first layer's side: "4KB,64KB,1MB"
    or a tuple."""
    parts = spec.split(",") if isinstance(spec, str) else spec if isinstance(spec, tuple) else [spec]
    sizes = tuple(parse_size(p.strip() if isinstance(p, str) else p, what) for p in parts)
    if len(sizes) == 1:
        return sizes[0]
    if 0 in sizes:
        raise ValueError(f"{what} {spec!r}: a schedule's bucket sizes are above 0 (0 alone: no buckets, one "
                         "all-reduce after the backward pass)")
    return sizes


def _pack(pairs: list):
    """The gradients of (gradient, variable) pairs as one flat tensor."""
    flat = [array_ops.reshape(g, [-1]) for g, _ in pairs]
    return array_ops.concat(flat, 0) if len(flat) > 1 else flat[0]


def _unpack(flat, pairs: list) -> dict:
    """{variable: its part of `flat` (_pack's layout), shaped as the variable}."""
    shapes = [v.get_shape().as_list() for _, v in pairs]
    parts = array_ops.split(flat, [math.prod(s) for s in shapes], 0) if len(pairs) > 1 else [flat]
    return {v: array_ops.reshape(p, s) for p, s, (_, v) in zip(parts, shapes, pairs)}


def _buckets(pairs: list, limit: int | tuple[int, ...]) -> list[list]:
    """(gradient, variable) pairs cut into buckets, listed from the last variable's to the first's (the order a
    backward pass computes a model's gradients in), each bucket's pairs in that order too. A size: buckets of at
    least `limit` bytes, cut from the last variable (the one holding the first variables may be smaller). A
    schedule: cut from the first variable, the k-th bucket at most limit[k] bytes (the last size for the rest)."""
    if isinstance(limit, tuple):
        return _growing_buckets(pairs, limit)
    buckets, current, n = [], [], 0
    for g, v in reversed(pairs):
        current.append((g, v))
        n += _nbytes(g, v)
        if n >= limit:
            buckets.append(current)
            current, n = [], 0
    return buckets + [current] if current else buckets


def _growing_buckets(pairs: list, sizes: tuple[int, ...]) -> list[list]:
    buckets, current, n = [], [], 0
    for g, v in pairs:
        nbytes = _nbytes(g, v)
        if current and n + nbytes > sizes[min(len(buckets), len(sizes) - 1)]:
            buckets.append(current)
            current, n = [], 0
        current.append((g, v))
        n += nbytes
    buckets.append(current)
    return [b[::-1] for b in reversed(buckets)]


def _nbytes(g, v) -> int:
    return math.prod(v.get_shape().as_list()) * g.dtype.size


def _start_early(starts: list, buckets: list) -> None:
    """Makes the backward ops that only later buckets need wait for each bucket's MpiAllreduceStart (control
    inputs), so that a bucket's all-reduce starts as soon as its gradients are computed. Without them, the executor
    (creation order among ready ops) would run every gradient op first, the Starts being made after them all.
    Only ops tf.gradients added wait (op.backward): a forward op may be run by other steps, such as evaluation."""
    for k, start in enumerate(starts[:-1]):
        before = needed_ops([start], set())
        later = {op for op in needed_ops([g for b in buckets[k + 1:] for g, _ in b], set())
                 if op.backward and op not in before}
        for op in later:
            if not any(t.op in later for t in op.inputs) and not any(c in later for c in op.control_inputs):
                op._add_control_input(start)


def _check_root(root: int) -> None:
    if not 0 <= root < size():
        raise ValueError(f"broadcast root rank {root} is not a rank of this job (0 .. {size() - 1})")


def _broadcast_op(root: int, variables=None):
    """The op that sets `variables` (default: the global variables) of every rank to rank `root`'s values when it
    runs: for each variable, an all-reduce of root's value and every other rank's zeros (x + 0 is x exactly), in
    the variable's dtype, or in float64 for one the all-reduce kernels do not take (_carrier).
    One variable after another (control inputs): the same order on every rank, and no more memory at a time than
    the largest variable's copy, so a step planned under a memory budget still fits. An op, so that it can be
    built before the session and run after initialization, as Horovod's; the ranks other than root never read
    their variables, so they may run it before initializing theirs."""
    _check_root(root)
    mine = rank() == root
    assigns: list = []
    with name_scope("DistributedBroadcast"):
        for v in global_variables() if variables is None else variables:
            shape, dtype = v.get_shape().as_list(), v.dtype.base_dtype
            if None in shape:
                raise ValueError(f"broadcast_global_variables: variable {v.op.name!r} has shape {shape}; a "
                                 "broadcast needs every variable's full shape")
            carrier = _carrier(dtype)
            with control_dependencies(assigns[-1:]):
                value = math_ops.cast(v, carrier) if mine else array_ops.zeros(shape, carrier)
                total = mpi_allreduce(value)
            assigns.append(state_ops.assign(v, math_ops.cast(total, dtype) if carrier != dtype else total).op)
    return control_flow_ops.group(*assigns, name="DistributedBroadcast")


def broadcast_variables(variables, root_rank: int):
    """The op that copies rank `root_rank`'s values of `variables` to every rank (Horovod's); every rank must run
    it, with the same variables in the same order.

        >>> sess.run(broadcast_variables(tf.trainable_variables(), 0))
    """
    return _broadcast_op(root_rank, list(variables))


def broadcast_global_variables(root_rank: int, session=None):
    """The op that copies rank `root_rank`'s global variables (weights, optimizer slots, the global step) to every
    rank (Horovod's); every rank must run it, once, after initialization or a restore, so that the ranks start
    equal. Given a `session`, it runs there at once too.

        >>> bcast = broadcast_global_variables(0)            # build it with the graph, as Horovod's
        >>> sess.run(tf.global_variables_initializer()); sess.run(bcast)
    """
    op = _broadcast_op(root_rank)
    if session is not None:
        session.run(op)
    return op


class BroadcastGlobalVariablesHook(SessionRunHook):
    """A MonitoredSession hook that broadcasts rank `root_rank`'s global variables once the session is created
    (initialized or restored from a checkpoint), as Horovod's hook of the same name."""

    def __init__(self, root_rank: int = 0):
        self.root_rank = root_rank
        self._op = None

    def begin(self):
        if self._op is None or self._op.graph is not get_default_graph():
            self._op = _broadcast_op(self.root_rank)

    def after_create_session(self, session, coord):
        session.run(self._op)
