"""The generic graph engine: waves, critical path, cycles, the mirror order, references read
off typed params, and the bounded parallel runner."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest

from provisioner.graph.graph import CycleError, Graph
from provisioner.graph.ref import After, Ref, ref_types, refs_in
from provisioner.graph.runner import run


def test_waves_and_critical_path() -> None:
    graph = Graph.of({"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]})
    assert graph.waves() == [["a"], ["b", "c"], ["d"]]
    seconds, chain = graph.critical_path({"a": 1, "b": 10, "c": 3, "d": 2})
    assert seconds == 13 and chain == ["a", "b", "d"]
    assert graph.mirror().waves() == [["d"], ["b", "c"], ["a"]]


def test_cycles_and_unknown_dependencies_are_refused() -> None:
    with pytest.raises(CycleError, match="cycle"):
        Graph.of({"a": ["b"], "b": ["a"]})
    with pytest.raises(KeyError, match="unknown"):
        Graph.of({"a": ["zzz"]})


@dataclass(frozen=True)
class Out:
    id: str


@dataclass(frozen=True)
class Other:
    id: str


@dataclass(frozen=True)
class Inner:
    peer: Ref[Other] | None


@dataclass(frozen=True)
class Params:
    one: Ref[Out]
    many: tuple[Ref[Out], ...]
    nested: Inner
    later: After[Other]
    plain: str = "x"


def test_references_are_read_off_params_and_their_annotations() -> None:
    params = Params(
        Ref("a", Out), (Ref("b", Out), Ref("c", Out)), Inner(Ref("d", Other)), After("e", Other)
    )
    assert [r.target for r in refs_in(params)] == ["a", "b", "c", "d", "e"]
    assert ref_types(Params) == ({Out, Other}, {Other})


def test_the_runner_runs_dependencies_first_in_parallel_and_stops_on_failure() -> None:
    graph = Graph.of({"a": [], "b": [], "c": ["a", "b"], "d": ["c"], "e": []})
    started: list[str] = []
    running = 0
    most = 0
    lock = threading.Lock()

    def task(node: str) -> str:
        nonlocal running, most
        with lock:
            started.append(node)
            running += 1
            most = max(most, running)
        time.sleep(0.05)
        with lock:
            running -= 1
        if node == "c":
            raise RuntimeError("c broke")
        return "done"

    result = run(graph, task, parallelism=2)
    assert most == 2  # a and b (or e) side by side, never more than the bound
    assert started.index("c") > max(started.index("a"), started.index("b"))
    assert set(result.failed) == {"c"} and "d" in result.skipped and not result.ok
