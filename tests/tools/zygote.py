"""A fork server for the tests' `fmctl` processes: real processes, without a second of
imports each.

Every end-to-end test runs `fmctl` as a process (a kill, a signal, a lock held by a live pid
must be real), and each process spent about a second importing boto3, botocore, pydantic
and fmctl before its first call: across the suite, minutes of a 2-core machine. The server
imports all of that once, then forks a child per run; the child takes the caller's standard
streams (passed over a Unix socket), environment, working directory and arguments, resets
what a new interpreter would have fresh (signal handlers, the random state, faulthandler),
and runs the console script's entry point, exiting as the interpreter would (threads joined,
atexit run, streams flushed). The caller gets a ``Forked`` with the part of
``subprocess.Popen``'s interface the tests use; its pid is the child's, so signals reach
fmctl itself.

The socket lives in a folder only its owner can enter (0700): no other user of the machine
can ask it to run anything. Set ``FMCTL_TEST_FORK=0`` to run every `fmctl` as a plain
subprocess instead.
"""

from __future__ import annotations

import array
import contextlib
import io
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

#: What the server imports before it forks: what every `fmctl` run against the sandbox
#: imports anyway (the rest, each child imports itself).
PRELOAD = (
    "provisioner.cli.main",
    "provisioner.ops.engine",
    "provisioner.ops.status",
    "provisioner.ops.teardown",
    "provisioner.ops.gc",
    "provisioner.ops.listing",
    "provisioner.ops.seed",
    "provisioner.ops.sandbox_link",
    "importlib.metadata",
    "provisioner.drivers.aws",
    "provisioner.drivers.kube",
    "fmctl_sandbox.daemon",
    "boto3",
    "botocore.session",
    "botocore.client",
    "botocore.endpoint",
    "botocore.httpsession",
    "botocore.parsers",
    "botocore.serialize",
    "botocore.waiter",
    "botocore.paginate",
    "yaml",
    "jinja2",
)


#: The AWS services fmctl calls (its ``client("...")``s): their models are parsed here once.
SERVICES = (
    "autoscaling", "budgets", "ce", "cloudformation", "ec2", "eks", "events", "fsx", "iam",
    "kms", "lambda", "logs", "pcs", "pricing", "resourcegroupstaggingapi", "s3", "scheduler",
    "service-quotas", "sns", "ssm", "sts",
)  # fmt: skip


def _warm_botocore() -> None:
    """Make a client of each service once: botocore parses its model, endpoint rules and
    partitions into the data loader drivers.aws shares across a process's sessions, and
    every child inherits it parsed (creating clients was a sixth of a child's time). No
    call is made: a client reaches for its endpoint only when used."""
    from provisioner.drivers.aws import Aws

    aws = Aws("us-east-1", "https://127.0.0.1:1", sandbox=True, credentials=("none", "none"))
    for service in SERVICES:
        client = aws.client(service)
        # Its paginators' and waiters' models too: a child's first paginate or waiter would
        # otherwise list botocore's whole data folder for them (about 20 ms each).
        client.can_paginate(next(iter(client.meta.method_to_api_mapping)))
        client.waiter_names  # noqa: B018 - read for its side effect: the model is loaded


def _warm_entry_points() -> None:
    """Find the sandbox's entry point once (every `fmctl ... --sandbox` run does): the
    children inherit importlib.metadata's listings of the installed distributions."""
    from provisioner.ops.sandbox_link import sandbox

    sandbox()


def enabled() -> bool:
    """Whether the tests fork their `fmctl` runs (FMCTL_TEST_FORK, default on)."""
    return os.environ.get("FMCTL_TEST_FORK", "1") != "0"


# -- the server -------------------------------------------------------------------------


def serve(path: Path) -> None:
    """Import PRELOAD, then fork a child per request on the socket at ``path``; report each
    child's pid and, once reaped, its wait status to the connection that asked for it."""
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    _warm_botocore()
    _warm_entry_points()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(64)
    (path.parent / "ready").write_text(str(os.getpid()))
    waiting: dict[int, socket.socket] = {}  # child pid -> its caller
    parent = os.getppid()
    while True:
        readable, _, _ = select.select([listener], [], [], 0.02)
        if readable:
            conn, _ = listener.accept()
            pid = _fork(conn, listener, waiting)
            if pid:
                waiting[pid] = conn
        _reap(waiting)
        if os.getppid() != parent:  # the test process is gone: so are we
            return


def _fork(conn: socket.socket, listener: socket.socket, waiting: dict[int, socket.socket]) -> int:
    """Read one request and fork its child; the child's pid (0 when the request was bad)."""
    try:
        message, fds = _receive(conn)
        request = json.loads(message)
    except (OSError, ValueError):
        conn.close()
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        listener.close()
        for other in waiting.values():
            other.close()
        conn.close()
        _run_child(request, fds)
    for fd in fds:
        os.close(fd)
    conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    return pid


def _reap(waiting: dict[int, socket.socket]) -> None:
    """Report every child that ended."""
    while waiting:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = waiting.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps({"status": status}).encode() + b"\n")
            conn.close()


def _run_child(request: dict[str, Any], fds: list[int]) -> None:
    """Become the `fmctl` process the request describes, and exit as it would."""
    code = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        # What a new interpreter starts with.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        import random

        random.seed()
        # As the interpreter opens them on pipes: stdout block-buffered, stderr by line.
        sys.stdin = io.TextIOWrapper(os.fdopen(0, "rb"), encoding="utf-8")
        sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb"), encoding="utf-8")
        sys.stderr = io.TextIOWrapper(
            os.fdopen(2, "wb"), encoding="utf-8", errors="backslashreplace", line_buffering=True
        )
        if os.environ.get("PYTHONFAULTHANDLER"):
            import faulthandler

            faulthandler.enable()
        sys.argv = ["fmctl", *request["args"]]
        code = _main(request["args"])
    finally:
        os._exit(code)


def _main(args: list[str]) -> int:
    """The entry point's exit status, after what the interpreter does at exit."""
    import atexit
    import traceback

    from provisioner.cli.main import main

    code = 0
    try:
        main(args)
    except SystemExit as done:
        if isinstance(done.code, int):
            code = done.code
        elif done.code is not None:
            print(done.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        code = 128 + signal.SIGINT
    except BaseException:
        traceback.print_exc()
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # as Py_FinalizeEx: join threads
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    return code


def _receive(conn: socket.socket) -> tuple[bytes, list[int]]:
    """A length-prefixed message and the file descriptors sent with it."""
    fds = array.array("i")
    head, ancillary, _, _ = conn.recvmsg(4, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    (size,) = struct.unpack("!I", head)
    body = b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise OSError("request cut short")
        body += chunk
    return body, list(fds)


# -- the caller -------------------------------------------------------------------------

_SERVER: dict[str, Any] = {}
_SERVER_LOCK = threading.Lock()


def _socket_path() -> Path:
    """The running server's socket, started on first use (one per test process)."""
    with _SERVER_LOCK:
        if _SERVER.get("pid") == os.getpid():
            return Path(_SERVER["path"])
        folder = Path(tempfile.mkdtemp(prefix="fmctl-fork-"))  # 0700: its owner's only
        path = folder / "socket"
        env = {**os.environ, "AWS_EC2_METADATA_DISABLED": "true"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.tools.zygote", str(path)],
            cwd=Path(__file__).resolve().parents[2],
            env={k: v for k, v in env.items() if not k.startswith("AWS_") or "METADATA" in k},
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while not (folder / "ready").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the fork server did not start (exit {proc.poll()})")
            time.sleep(0.02)
        _SERVER.update(pid=os.getpid(), path=str(path), proc=proc)
        import atexit

        atexit.register(proc.terminate)
        return path


class Forked:
    """A forked `fmctl` run, with the part of ``subprocess.Popen``'s interface the tests
    use: ``pid``, ``stdout``/``stderr`` (when piped), ``poll``, ``wait``, ``communicate``,
    ``send_signal``, ``kill``, ``returncode``."""

    def __init__(
        self,
        args: Sequence[str],
        env: Mapping[str, str],
        cwd: Path,
        stdout: int | None,
        stderr: int | None,
        stdin: int | None = None,
    ) -> None:
        if stdout is None:
            raise ValueError("forked runs always capture stdout")
        self.args = ["fmctl", *args]
        self.returncode: int | None = None
        self.stdin: IO[str] | None = None
        self.stderr: IO[str] | None = None
        if stdin == subprocess.PIPE:
            child_in, write_end = os.pipe()
            self.stdin = open(write_end, "w", encoding="utf-8")  # noqa: SIM115
        else:
            child_in = os.open(os.devnull, os.O_RDONLY)
        read_end, out_w = os.pipe()
        self.stdout: IO[str] = open(read_end, encoding="utf-8", errors="replace")  # noqa: SIM115
        err_w = out_w
        if stderr != subprocess.STDOUT:
            read_end, err_w = os.pipe()
            self.stderr = open(read_end, encoding="utf-8", errors="replace")  # noqa: SIM115
        request = json.dumps({"args": list(args), "env": dict(env), "cwd": str(cwd)}).encode()
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._conn.connect(str(_socket_path()))
        fds = array.array("i", [child_in, out_w, err_w])
        self._conn.sendmsg(
            [struct.pack("!I", len(request)) + request],
            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds.tobytes())],
        )
        for fd in {child_in, out_w, err_w}:
            os.close(fd)
        self._lines = self._conn.makefile("r", encoding="utf-8")
        self.pid = int(json.loads(self._lines.readline())["pid"])

    def _status(self, timeout: float | None) -> int | None:
        if self.returncode is not None:
            return self.returncode
        ready, _, _ = select.select([self._conn], [], [], timeout)
        if not ready:
            return None
        line = self._lines.readline()
        status = int(json.loads(line)["status"]) if line else 0
        self.returncode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        self._conn.close()
        return self.returncode

    def poll(self) -> int | None:
        """The exit status, or None while it runs."""
        return self._status(0)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the run to end; its exit status (negative: the signal that ended it)."""
        code = self._status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def communicate(
        self, input: str | None = None, timeout: float | None = None
    ) -> tuple[str, str | None]:
        """Send ``input``, read stdout and stderr to their ends, wait; (stdout, stderr)."""
        if self.stdin is not None:
            if input:
                self.stdin.write(input)
            self.stdin.close()
        found: dict[str, str] = {}

        def drain(name: str, stream: IO[str]) -> None:
            found[name] = stream.read()

        readers = [
            threading.Thread(target=drain, args=(name, stream), daemon=True)
            for name, stream in (("out", self.stdout), ("err", self.stderr))
            if stream is not None
        ]
        for reader in readers:
            reader.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        for reader in readers:
            reader.join(None if deadline is None else max(deadline - time.monotonic(), 0))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self.wait(None if deadline is None else max(deadline - time.monotonic(), 0.1))
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        return found.get("out", ""), found.get("err") if self.stderr is not None else None

    def send_signal(self, sig: int) -> None:
        """Signal the run (nothing once it has ended)."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL the run."""
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        """SIGTERM the run."""
        self.send_signal(signal.SIGTERM)


def run(
    args: Sequence[str], env: Mapping[str, str], cwd: Path, timeout: float, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run`` of `fmctl ARGS` (output captured), forked."""
    proc = Forked(
        args, env, cwd, subprocess.PIPE, subprocess.PIPE, subprocess.PIPE if stdin else None
    )
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(30)
        raise
    return subprocess.CompletedProcess(proc.args, proc.wait(), out, err or "")


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
