"""`fmctl` run inside the test process: the same entry point as the console script
(``provisioner.cli.main.main``), its own environment, working directory and standard
streams, and the outcome a subprocess would give (exit status, stdout, stderr; an uncaught
exception prints its traceback and exits 1, as the interpreter does).

For tests where a subprocess proves nothing extra: a bad spec's located error and exit
status, an `up` that must stop before any AWS call. Signals, kills and exit codes of a dying
process keep their subprocesses (tests/engine/harness.py). A run here takes milliseconds
where a process takes a second of imports (boto3, pydantic); runs are serialised, since the
environment and the standard streams belong to the whole process.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

_LOCK = threading.Lock()


class _Stream(io.TextIOWrapper):
    """A text stream over bytes, with ``buffer`` as a process's has, that is no terminal
    (as a pipe is not)."""

    def __init__(self, data: str = "") -> None:
        super().__init__(io.BytesIO(data.encode()), encoding="utf-8", write_through=True)

    def isatty(self) -> bool:
        return False

    def getvalue(self) -> str:
        """Everything written so far."""
        self.flush()
        raw = self.buffer
        assert isinstance(raw, io.BytesIO)
        return raw.getvalue().decode("utf-8", "replace")


@contextmanager
def _environment(env: Mapping[str, str | None]) -> Iterator[None]:
    saved = dict(os.environ)
    try:
        for key, value in env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def fmctl(
    *args: str,
    env: Mapping[str, str | None] | None = None,
    stdin: str | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``fmctl ARGS`` here; ``env`` entries set (or, with None, unset) variables for
    the run only. Never reaches AWS on its own: the caller's environment decides, as for a
    subprocess (tests/conftest.py removes credentials and instance metadata)."""
    from provisioner.cli.main import main

    out, err = _Stream(), _Stream()
    with _LOCK, _environment(env or {}):
        streams = (sys.stdin, sys.stdout, sys.stderr)
        here = Path.cwd()
        sys.stdin, sys.stdout, sys.stderr = _Stream(stdin or ""), out, err
        try:
            if cwd is not None:
                os.chdir(cwd)
            code = _exit_status(main, list(args))
        finally:
            sys.stdin, sys.stdout, sys.stderr = streams
            os.chdir(here)
    return subprocess.CompletedProcess(["fmctl", *args], code, out.getvalue(), err.getvalue())


def _exit_status(main: object, argv: list[str]) -> int:
    """``main(argv)``'s exit status as the interpreter would report it."""
    try:
        main(argv)  # type: ignore[operator]
    except SystemExit as done:
        if done.code is None:
            return 0
        if isinstance(done.code, int):
            return done.code
        print(done.code, file=sys.stderr)
        return 1
    except BaseException:  # what would reach the interpreter: it prints the traceback
        traceback.print_exc(file=sys.stderr)
        return 1
    return 0
