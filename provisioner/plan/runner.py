"""Running a plan: every node as soon as its dependencies are done, at most N at a time.

On a failure nothing new starts; what is running finishes (a half-made resource is worse
than a finished one), and the run reports every failure. Running the same plan again after a
crash or a failure discovers what exists and creates only the rest.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from provisioner.plan.context import Engine
from provisioner.plan.graph import Found, Kind, Node, Plan

DEFAULT_PARALLELISM = 8


@dataclass
class RunResult:
    """What a run did, per node."""

    done: dict[str, str] = field(default_factory=dict)  # node -> "created" | "existed" | ...
    failed: dict[str, BaseException] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    wall: float = 0.0

    @property
    def ok(self) -> bool:
        """True when every node succeeded."""
        return not self.failed and not self.skipped


def _execute(
    plan: Plan, engine: Engine, task: Callable[[Node], str], parallelism: int
) -> RunResult:
    result = RunResult()
    start = time.monotonic()
    pending = dict(plan.nodes)
    running: dict[Future[str], tuple[str, float]] = {}
    with ThreadPoolExecutor(max_workers=parallelism, thread_name_prefix="fmctl") as pool:
        while pending or running:
            if not result.failed:
                ready = sorted(
                    n for n, node in pending.items() if all(d in result.done for d in node.deps)
                )
                for n in ready[: max(0, parallelism - len(running))]:
                    node = pending.pop(n)
                    running[pool.submit(task, node)] = (n, time.monotonic())
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
                    engine.emit(n, "failed", str(error))
    result.skipped = sorted(pending)
    result.wall = time.monotonic() - start
    return result


def run_up(
    plan: Plan, engine: Engine, kinds: dict[str, Kind], parallelism: int = DEFAULT_PARALLELISM
) -> RunResult:
    """Create what is missing, wait for everything, record outputs."""

    def task(node: Node) -> str:
        kind = kinds[node.kind]
        outputs = kind.discover(engine, node)
        state = "existed"
        if outputs is None:
            if not node.owned:
                raise LookupError(f"{node.id}: {node.params.get('describe', 'not found')}")
            engine.emit(node.id, "creating")
            outputs = kind.create(engine, node)
            state = "created"
        else:
            engine.emit(node.id, "exists", str(outputs.get("id", "")))
        engine.emit(node.id, "waiting")
        outputs = kind.wait(engine, node, outputs)
        with engine.lock:
            engine.outputs[node.id] = outputs
        engine.emit(node.id, "ready", str(outputs.get("id", "")))
        return state

    return _execute(plan, engine, task, parallelism)


def run_down(
    plan: Plan, engine: Engine, kinds: dict[str, Kind], parallelism: int = DEFAULT_PARALLELISM
) -> RunResult:
    """Delete found resources, each after everything that depends on it."""

    def task(node: Node) -> str:
        found: Found = node.params["found"]
        engine.emit(node.id, "deleting", found.id)
        kinds[node.kind].delete(engine, found)
        engine.emit(node.id, "deleted", found.id)
        return "deleted"

    return _execute(plan, engine, task, parallelism)
