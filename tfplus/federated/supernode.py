"""`tfplus federated supernode`: Flower's SuperNode with its ClientApp kept warm between rounds.

    tfplus federated supernode --insecure --superlink SERVER:8000 --node-config "partition-id=0 num-partitions=2"

takes flower-supernode's flags (Flower 1.42) and runs the same SuperNode, with two changes to how it waits:
- Flower's default isolation starts a fresh `flwr-clientapp` process for every message (each round): it imports
  Flower and tfplus, makes the model and its programs and reads the shard again. Here the SuperNode runs with
  `--isolation process` and one long-lived process of this module takes its ClientApp tasks from the SuperNode's
  Runtime API one after another (serve_tasks), keeping all of that from round to round (tfplus.federated.flower's
  model cache).
- Flower's SuperNode waits a fixed 3 s after each poll of the SuperLink that found no message (so a round's message
  waited 1.5 s on average): here --idle-poll seconds; and 0.5 s between looks for the ClientApp's reply: here
  LOCAL_POLL.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import subprocess
import sys
import time
import types

IDLE_POLL = 0.5   # seconds: a SuperNode's wait between polls of the SuperLink that found nothing (Flower: 3)
TASK_POLL = 0.1   # seconds: the warm process's wait between looks for a task (Flower's SuperExec: 1)
LOCAL_POLL = 0.02  # seconds: the SuperNode's wait between looks for its ClientApp's reply (Flower: 0.5)


class _ShortSleeps:
    """Stands for the `time` module in Flower's SuperNode loop: its 3 s sleep after a poll of the SuperLink that
    found nothing becomes `idle` s, and its 0.5 s sleeps between looks at the SuperNode's own state (for the
    ClientApp's reply, or an object of it), in memory and cheap to repeat, LOCAL_POLL s.
    NOTE: Flower 1.42 (flwr.supernode.start_client_internal) hard-codes them as time.sleep(3) and time.sleep(0.5)
    on that module's `time`, and no flag or setting changes them."""

    def __init__(self, idle: float):
        self.idle = idle

    def sleep(self, seconds: float) -> None:
        time.sleep(min(seconds, self.idle if seconds >= 3 else LOCAL_POLL))

    def __getattr__(self, name: str):
        return getattr(time, name)


def _keep_handlers(register):
    """Flower's register_signal_handlers, leaving this command's signal handlers in place: Flower's exit handlers
    (its servers' stops) are added, but a Ctrl-C, SIGTERM or SIGHUP still raises here (KeyboardInterrupt, the
    command line's Stopped) and ends the command with its one line and 128 + the signal. NOTE: Flower's own
    handlers made a Ctrl-C a graceful exit with status 0 and a dozen log lines, and before they were set (while
    its Runtime API's web server started) a Ctrl-C left that server's thread running: the process printed that it
    was interrupted and stayed, until a second Ctrl-C."""
    def keep(*args, **kwargs):
        ours = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None))
                if s is not None}
        register(*args, **kwargs)
        for s, handler in ours.items():
            signal.signal(s, handler)
    return keep


def _recording_servers(uvicorn, servers: list):
    """A stand-in for the `uvicorn` module in Flower's SuperNode CLI whose Server records each it makes, for
    main() to stop them whatever interrupts the SuperNode (Flower stops its web server only on its own exit)."""
    class Server(uvicorn.Server):
        def __init__(self, config):
            super().__init__(config)
            servers.append(self)

    return types.SimpleNamespace(Server=Server, Config=uvicorn.Config)


def _runtime_client(address: str, *interceptors):
    from flwr.supercore.interceptors import RuntimeVersionHttpInterceptor
    from flwr.supercore.retry import make_simple_http_retry_invoker
    from flwr.supercore.runtime import RuntimeHttpClient
    return RuntimeHttpClient.from_server_address(
        server_address=address, insecure=True, root_certificates=None,
        interceptors=[RuntimeVersionHttpInterceptor(component_name="flwr-clientapp"), *interceptors],
        retry_invoker=make_simple_http_retry_invoker())


def _run_task(address: str, token: str, apps: dict) -> None:
    """One ClientApp task, as a `flwr-clientapp` process runs it (flwr.supernode.runtime.run_clientapp), in this
    process: pull the message, run the app (loaded once per app bundle, FAB), push the reply, then the task's end;
    an exception in the app becomes the reply's error, as in Flower."""
    from flwr.app import Message
    from flwr.app.error import Error
    from flwr.cli.install import install_from_fab
    from flwr.clientapp.utils import get_load_client_app_fn
    from flwr.common.constant import ErrorCode, SubStatus
    from flwr.supercore.heartbeat import HeartbeatSender, make_task_heartbeat_fn_http
    from flwr.supercore.interceptors import RuntimeTokenHttpInterceptor
    from flwr.supernode.runtime.run_clientapp import pull_task_input, push_message, push_task_output
    client = _runtime_client(address, RuntimeTokenHttpInterceptor(token))
    heartbeat = HeartbeatSender(make_task_heartbeat_fn_http(client))
    heartbeat.start()
    message = context = reply = None
    status, details = SubStatus.FAILED, "ClientApp task failed"
    try:
        message, context, run, fab = pull_task_input(client)
        if fab.hash_str not in apps:
            install_from_fab(fab.content, skip_prompt=True)
            apps[fab.hash_str] = get_load_client_app_fn("", None, multi_app=True)(run.fab_id, run.fab_version,
                                                                                   fab.hash_str)
        reply = apps[fab.hash_str](message=message, context=context)
        status, details = SubStatus.COMPLETED, ""
    except Exception as e:  # the server sees it as this client's failure, and the next task still runs
        details = f"{type(e)}:<'{e}'>"
        print(f"tfplus federated supernode: the ClientApp raised {details}", file=sys.stderr, flush=True)
        if message is not None:
            reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=details), reply_to=message)
    finally:
        try:
            if reply is not None and context is not None:
                push_message(client, reply, context)
        finally:
            heartbeat.stop()
            push_task_output(client, context, status, details)
            client.close()


def serve_tasks(address: str, parent_pid: int | None = None) -> None:
    """Takes the ClientApp tasks of the SuperNode whose Runtime API is at `address` and runs them in this process,
    one at a time, for as long as that SuperNode (`parent_pid`) lives."""
    from flwr.proto.runtime_pb2 import AcquireTaskRequest
    from flwr.supercore.app_utils import start_parent_process_monitor
    from flwr.supercore.constant import TaskType
    if parent_pid is not None:
        start_parent_process_monitor(parent_pid)  # SIGINT to this process when the SuperNode ends
    acquirer = _runtime_client(address)
    apps: dict = {}
    request = AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP])
    while True:
        task = acquirer.AcquireTask(request)
        if task.HasField("task") and task.token:
            try:
                _run_task(address, task.token, apps)
            except Exception as e:  # talking to the SuperNode failed (the app's own errors are its replies)
                print(f"tfplus federated supernode: a task failed: {type(e).__name__}: {e}", file=sys.stderr,
                      flush=True)
        else:
            time.sleep(TASK_POLL)


def _split_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """This command's own flags, and flower-supernode's (the rest), checked for what this command sets itself."""
    from tfplus.trainer import UsageError
    p = argparse.ArgumentParser(prog="tfplus federated supernode", add_help=False)
    p.add_argument("--idle-poll", type=float, default=IDLE_POLL)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9094)
    ours, flower = p.parse_known_args(argv)
    for flag in ("--isolation", "--ssl-certfile", "--ssl-keyfile", "--ssl-ca-certfile"):
        if any(a == flag or a.startswith(flag + "=") for a in flower):
            raise UsageError(f"{flag} is not for this command: it runs the ClientApp in its own process on this "
                             "machine (--isolation process, the Runtime API without TLS); use flower-supernode for "
                             "that setup")
    if not 0 < ours.idle_poll <= 3:
        raise UsageError(f"--idle-poll {ours.idle_poll}: give seconds in (0, 3]")
    return ours, [*flower, "--host", ours.host, "--port", str(ours.port), "--isolation", "process"]


def _start_worker(address: str) -> subprocess.Popen:
    """The warm ClientApp process, in a session of its own: a signal to the SuperNode's process group (Ctrl-C, a
    supervisor's SIGTERM) ends the SuperNode, which ends this process (and this process notices a SuperNode that
    was killed: start_parent_process_monitor)."""
    return subprocess.Popen([sys.executable, "-m", "tfplus.federated.supernode", address, str(os.getpid())],
                            start_new_session=True)


def main(argv: list[str]) -> int:
    """Runs Flower's SuperNode (flower-supernode's flags in `argv`, plus --idle-poll) in this process and the warm
    ClientApp process beside it (started again if it dies: its task fails, the next runs); returns or exits as
    the SuperNode does."""
    if {"-h", "--help"} & set(argv):
        print(__doc__ + HELP)
        return 0
    ours, flower = _split_args(argv)
    import threading

    from tfplus.trainer import UsageError
    try:
        # the module, not the function its package exports under the same name
        supernode_cli = importlib.import_module("flwr.supernode.cli.flower_supernode")
        import flwr.supernode.start_client_internal as loop
        import uvicorn
        from flwr.supercore.exit import register_signal_handlers
    except ImportError as e:
        raise UsageError(f"needs Flower ({e}); install it with pip install \"tfplus[federated]\"") from None
    from tfplus.engine.signals import deferred
    address = f"[{ours.host}]:{ours.port}" if ":" in ours.host else f"{ours.host}:{ours.port}"
    worker: list = [None]
    servers: list = []  # Flower's Runtime API web servers (_recording_servers)
    done, starting = threading.Event(), threading.Lock()

    def keep_worker() -> None:
        while True:
            code = worker[0].wait()
            if done.wait(1):  # the SuperNode ends; else a second between starts, where one cannot start
                return
            with starting:  # NOTE: not once the SuperNode ends: a process started then outlived the command
                if done.is_set():
                    return
                print(f"tfplus federated supernode: the ClientApp process ended (exit {code}); starting another",
                      file=sys.stderr, flush=True)
                worker[0] = _start_worker(address)

    try:
        # NOTE: a stop signal (the command line's Stopped) comes out once the process is in `worker`, for the end
        # below: one while it started ended the command and left the process, in a session of its own, running and
        # printing Flower's retries until it saw its parent gone.
        with deferred():
            worker[0] = _start_worker(address)
        threading.Thread(target=keep_worker, daemon=True).start()
        loop.time = _ShortSleeps(ours.idle_poll)
        loop.register_signal_handlers = _keep_handlers(register_signal_handlers)
        supernode_cli.uvicorn = _recording_servers(uvicorn, servers)
        sys.argv = ["flower-supernode", *flower]
        supernode_cli.flower_supernode()
    except KeyboardInterrupt:  # Ctrl-C, or the command line's Stopped: its line comes last, the servers' are not
        logging.getLogger("uvicorn.error").disabled = True
        for server in servers:
            server.force_exit = True
        raise
    finally:
        for server in servers:  # its thread, not a daemon, would keep the process: it ends within 0.1 s
            server.should_exit = True
        with starting:
            done.set()
        if worker[0] is not None:
            worker[0].terminate()
            worker[0].wait()
    return 0


HELP = f"""
Its own flags (the others are flower-supernode's: flower-supernode --help lists them):
  --idle-poll SECONDS   the SuperNode's wait between polls of the SuperLink that found nothing (default {IDLE_POLL})
  --host, --port        the SuperNode's Runtime API, which the ClientApp process uses (default 127.0.0.1:9094; two
                        SuperNodes on one machine need two ports)
"""


if __name__ == "__main__":  # the warm ClientApp process: ADDRESS PARENT_PID
    try:
        serve_tasks(sys.argv[1], int(sys.argv[2]))
    except KeyboardInterrupt:  # Ctrl-C, or the SuperNode ended (start_parent_process_monitor's SIGINT)
        sys.exit(130)
