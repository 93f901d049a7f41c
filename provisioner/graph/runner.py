"""Running a graph: every node as soon as its dependencies are done, at most N at a time.

On a failure nothing new starts; what is running finishes (a half-made resource is worse than
a finished one), and the run reports every failure and what it never started.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from provisioner.graph.graph import Graph

DEFAULT_PARALLELISM = 8


@dataclass
class RunResult:
    """What a run did, per node."""

    #: node -> what its task said it did ("created", "updated", "deleted", ...)
    done: dict[str, str] = field(default_factory=dict)
    failed: dict[str, BaseException] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    wall: float = 0.0

    @property
    def ok(self) -> bool:
        """True when every node succeeded."""
        return not self.failed and not self.skipped


def run(
    graph: Graph,
    task: Callable[[str], str],
    parallelism: int = DEFAULT_PARALLELISM,
    on_failure: Callable[[str, BaseException], None] = lambda node, error: None,
) -> RunResult:
    """Run ``task`` on every node once its dependencies are done."""
    result = RunResult()
    start = time.monotonic()
    pending = dict(graph.deps)
    running: dict[Future[str], tuple[str, float]] = {}
    with ThreadPoolExecutor(max_workers=parallelism, thread_name_prefix="fmctl") as pool:
        while pending or running:
            if not result.failed:
                ready = sorted(n for n, needs in pending.items() if needs <= result.done.keys())
                for n in ready[: max(0, parallelism - len(running))]:
                    del pending[n]
                    running[pool.submit(task, n)] = (n, time.monotonic())
            if not running:
                break
            finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for future in finished:
                n, began = running.pop(future)
                result.seconds[n] = time.monotonic() - began
                error = future.exception()
                if error is None:
                    result.done[n] = future.result()
                else:
                    result.failed[n] = error
                    on_failure(n, error)
    result.skipped = sorted(pending)
    result.wall = time.monotonic() - start
    return result
