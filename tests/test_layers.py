"""The layering of docs/ARCHITECTURE.md holds: every import between provisioner's folders
points down, the CLI reaches only the use cases, the drivers and the graph engine import
nothing of fmctl, and no modules import each other in a circle. Imports under
``if TYPE_CHECKING:`` count: they are dependencies of the design."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from tests.conftest import ROOT, SHARED

PACKAGE = ROOT / "provisioner"
#: Folder -> rank (an import may point to a lower rank only), as docs/ARCHITECTURE.md draws them.
RANK = {
    "cli": 10,
    "ops": 9,
    "check": 8,
    "estimate": 8,
    "blueprint": 7,
    "state": 7,
    "validate": 6,
    "resources": 5,
    "render": 4,
    "graph": 3,
    "drivers": 2,
    "spec": 1,
    "catalog": 0,
    "shipped": 0,
}
#: Folders that import nothing of fmctl but themselves (and so does the sandbox, a package of
#: its own: tests/engine/test_sandbox_facts.py).
ISOLATED = {"drivers", "graph"}
#: Same-or-lower-rank imports the design allows explicitly (render and check ship files).
ALLOWED = {("spec", "catalog"), ("render", "shipped"), ("check", "shipped")}
#: The CLI stays thin: the use cases, and the spec and catalog for their types.
CLI_MAY_USE = {"ops", "spec", "catalog", "shipped"}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                found.add(".".join(base + ([node.module] if node.module else [])))
            elif node.module:
                found.add(node.module)
                # `from provisioner.render import images` imports a module, not a name.
                for alias in node.names:
                    candidate = f"{node.module}.{alias.name}"
                    if (ROOT / Path(*candidate.split("."))).with_suffix(".py").exists():
                        found.add(candidate)
    return {m for m in found if m == "provisioner" or m.startswith("provisioner.")}


def _folder(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _graph() -> dict[str, set[str]]:
    return {_module(p): _imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_folder_is_in_the_design() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith("_")}
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__")}
    assert folders | modules <= set(RANK), sorted((folders | modules) - set(RANK))


def test_imports_point_down() -> None:
    bad = []
    for module, targets in _graph().items():
        src = _folder(module)
        if src not in RANK:
            continue
        for target in targets:
            dst = _folder(target)
            if dst is None or dst == src or dst not in RANK or (src, dst) in ALLOWED:
                continue
            if src in ISOLATED:
                bad.append(f"{module} -> {target} ({src} imports nothing of fmctl)")
            elif src == "cli" and dst not in CLI_MAY_USE:
                bad.append(f"{module} -> {target} (the CLI reaches the use cases only)")
            elif RANK[src] <= RANK[dst]:
                bad.append(f"{module} -> {target} ({src} may not use {dst})")
    assert bad == []


def test_no_modules_import_each_other_in_a_circle() -> None:
    graph = _graph()
    edges = {m: {t for t in ts if t in graph and t != m} for m, ts in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    rings: list[list[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 5000))

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            ring = []
            while True:
                w = stack.pop()
                on.discard(w)
                ring.append(w)
                if w == v:
                    break
            if len(ring) > 1:
                rings.append(sorted(ring))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert rings == []


def test_the_workspace_layering_tool_agrees() -> None:
    """The workspace's own checker, where the workspace is laid out beside the clone."""
    tool = SHARED / "tools" / "layers.py"
    if not tool.is_file():
        import pytest

        pytest.skip(f"{tool} is not here (CI lays the workspace's shared/ beside the clone)")
    done = subprocess.run(
        [sys.executable, str(tool), str(ROOT)], capture_output=True, text=True, check=False
    )
    assert done.stdout.strip() == "layers: every import points down", done.stdout


def test_the_kinds_derive_their_teardown_order() -> None:
    """The down order between kinds is read off the params' references, and is acyclic
    (the registry builds it as a graph, which refuses a cycle)."""
    from provisioner.resources.registry import kind_deletion_order, kinds, waits_for

    order = kind_deletion_order()
    assert set(order.deps) == set(kinds())
    # What fmctl's own checks rely on: dependents before what they sit on.
    assert {"subnet", "sg", "igw", "route-table"} <= waits_for(order, "vpc")
    assert {"eks-nodegroup", "kube-stack", "eks-addon"} <= waits_for(order, "eks-cluster")
    assert "eks-nodegroup" in waits_for(order, "eks-addon")  # the CNI outlives the nodes
    assert "dra" in waits_for(order, "fsx") and "parallelcluster" in waits_for(order, "fsx")
    reasons: dict[str, set[str]] = defaultdict(set)
    for kind, blockers in order.deps.items():
        reasons[kind] |= set(blockers)
    assert not reasons["kube-stack"], "the in-cluster cleanup runs first"


def test_the_architecture_document_draws_these_ranks() -> None:
    """docs/ARCHITECTURE.md's layer table says exactly what this test enforces: each folder
    at its rank, and the folders that import nothing of fmctl."""
    import re

    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    drawn: dict[str, int] = {}
    for rank, folders in re.findall(r"^\| (\d+) \| ([^|]+) \|", text, flags=re.MULTILINE):
        for folder in re.findall(r"`(\w+)/`", folders):
            drawn[folder] = int(rank)
    assert drawn == RANK
    isolated = re.search(r"^((?:`\w+/`(?:, | and )?)+) import nothing of fmctl", text, re.MULTILINE)
    assert isolated is not None
    assert set(re.findall(r"`(\w+)/`", isolated.group(1))) == ISOLATED
