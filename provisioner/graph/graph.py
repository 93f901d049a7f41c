"""A dependency graph of named nodes: the waves that can run in parallel, the critical path,
and the mirror order for teardown."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from provisioner import FmctlBug


class CycleError(FmctlBug, ValueError):
    """The graph has a cycle; the message names the nodes on it."""


@dataclass(frozen=True)
class Graph:
    """Node -> the nodes it depends on (each must also be a node of the graph)."""

    deps: Mapping[str, frozenset[str]]

    @classmethod
    def of(cls, deps: Mapping[str, Iterable[str]]) -> Graph:
        """A graph from any iterables; unknown dependencies are an error, as are cycles."""
        graph = cls({n: frozenset(d) for n, d in deps.items()})
        for node, needs in graph.deps.items():
            missing = sorted(needs - graph.deps.keys())
            if missing:
                raise KeyError(f"{node} depends on unknown {missing}")
        graph.waves()  # raises on a cycle
        return graph

    def waves(self) -> list[list[str]]:
        """Waves of nodes: each depends only on earlier waves (what may run in parallel)."""
        done: set[str] = set()
        waves: list[list[str]] = []
        remaining = dict(self.deps)
        while remaining:
            wave = sorted(n for n, needs in remaining.items() if needs <= done)
            if not wave:
                raise CycleError(f"dependency cycle among {sorted(remaining)}")
            waves.append(wave)
            done.update(wave)
            for n in wave:
                del remaining[n]
        return waves

    def mirror(self) -> Graph:
        """The reverse graph: each node waits for every node that depends on it."""
        rev: dict[str, set[str]] = {n: set() for n in self.deps}
        for node, needs in self.deps.items():
            for need in needs:
                rev[need].add(node)
        return Graph({n: frozenset(d) for n, d in rev.items()})

    def critical_path(self, seconds: Mapping[str, float]) -> tuple[float, list[str]]:
        """The longest chain by ``seconds`` per node: the floor for a parallel run."""
        finish: dict[str, float] = {}
        via: dict[str, str | None] = {}
        for wave in self.waves():
            for n in wave:
                needs = self.deps[n]
                prev = max(sorted(needs), key=lambda d: finish[d]) if needs else None
                finish[n] = (finish[prev] if prev else 0.0) + seconds.get(n, 0.0)
                via[n] = prev
        if not finish:
            return 0.0, []
        last = max(sorted(finish), key=lambda n: finish[n])
        chain: list[str] = []
        end: str | None = last
        while end is not None:
            chain.append(end)
            end = via[end]
        return finish[last], chain[::-1]
