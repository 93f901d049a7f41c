"""`fmctl check NAME`'s gathering, piece by piece: which nodes it may use (never one a user's
job holds unless asked), the Kubernetes objects it creates (official schemas; each pod holds
its whole node), the framed stream both schedulers' runs print, the Kubernetes NCCL job's
output, and the head-node script run against a fake Slurm with the real node-check.sh."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from provisioner.catalog import load_catalog
from provisioner.check import outputs
from provisioner.check.judge import judge_nccl
from provisioner.check.kube_gather import (
    NodeState,
    Selection,
    nccl_manifests,
    node_manifests,
    node_states,
    select,
)
from provisioner.check.results import check_folder, passed_nodes, split_stream
from provisioner.check.slurm_gather import command_script, hostlist, nccl_step, node_step
from provisioner.drivers import yamlio
from provisioner.render.context import ClusterContext, build_context
from tests.check import fakes
from tests.conftest import ROOT, validate_text
from tests.tools.efa_rule import efa_devices
from tests.tools.standin import recorded

DATA = ROOT / "tests/data/check"
GPU, EFA = "nvidia.com/gpu", "vpc.amazonaws.com/efa"


def _context(example: str) -> ClusterContext:
    validation = validate_text((ROOT / "examples" / example).read_text())
    assert validation.ok and validation.resolved is not None
    return build_context(validation.resolved, load_catalog())


def _node(name: str, pool: str = "gpu", ready: bool = True, cordoned: bool = False) -> Any:
    return {
        "metadata": {"name": name, "labels": {"fmctl.dev/pool": pool}},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "allocatable": {GPU: "8", EFA: "16", "cpu": "188"},
        },
    }


def _pod(name: str, node: str, gpus: int = 0, owner: str = "", phase: str = "Running") -> Any:
    meta: dict[str, Any] = {"name": name, "namespace": "training"}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x"}]
    resources = {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}} if gpus else {}
    return {
        "metadata": meta,
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": resources}]},
        "status": {"phase": phase},
    }


def test_only_idle_ready_schedulable_gpu_nodes_are_chosen() -> None:
    nodes = [
        _node("n1"),
        _node("n2"),
        _node("n3", ready=False),
        _node("n4", cordoned=True),
        _node("n5"),
        _node("sys-1", pool=""),
    ]
    pods = [
        _pod("llama-0", "n2", gpus=8),  # a user's job: n2 is busy
        _pod("dcgm-exporter-x", "n1", gpus=0, owner="DaemonSet"),  # everywhere, holds nothing
        _pod("plugin", "n5", gpus=8, owner="DaemonSet"),  # a DaemonSet's pod never makes busy
        _pod("done-0", "n5", gpus=8, phase="Succeeded"),  # finished: holds nothing
        _pod("web", "n1"),  # a CPU-only pod does not hold the GPUs
    ]
    states = node_states(nodes, pods)
    chosen = select(states, ["gpu"], include_busy=False)
    assert [n.name for n in chosen.chosen["gpu"]] == ["n1", "n5"]
    why = {node: reason for node, _, reason in chosen.skipped}
    assert why["n2"].startswith("busy: training/llama-0 holds its GPUs")
    assert why["n3"] == "not Ready" and why["n4"] == "cordoned"
    assert "sys-1" not in why  # not a GPU pool of the spec: not the check's business

    asked = select(states, ["gpu"], include_busy=True)
    assert [n.name for n in asked.chosen["gpu"]] == ["n1", "n2", "n5"]
    assert {n for n, _, _ in asked.skipped} == {"n3", "n4"}


def test_a_node_the_verify_gate_holds_is_said_not_checked() -> None:
    """The check's pods do not tolerate the verify gate's startup taint: a node being
    verified, or one that failed its gate, is skipped with why, not waited for."""
    gate = [{"key": "fmctl.dev/unverified", "value": "true", "effect": "NoSchedule"}]
    verifying, failed, fine, faulty = _node("n1"), _node("n2"), _node("n3"), _node("n4")
    verifying["spec"]["taints"] = failed["spec"]["taints"] = gate
    # Taken out by the verify controller for a fault fmctl's node agent found.
    faulty["spec"]["taints"] = [{"key": "fmctl.dev/unhealthy", "effect": "NoSchedule"}]
    failed["metadata"]["annotations"] = {
        "fmctl.dev/verify": "failed 2026-12-06T06:32:25Z: FAIL gpus: 7 of 8"
    }
    fine["metadata"]["annotations"] = {"fmctl.dev/verify": "passed 2026-12-06T06:32:25Z"}
    nodes = node_states([verifying, failed, fine, faulty], [])
    chosen = select(nodes, ["gpu"], include_busy=True)
    assert [n.name for n in chosen.chosen["gpu"]] == ["n3"]
    why = {node: reason for node, _, reason in chosen.skipped}
    assert why == {
        "n1": "not verified yet (the verify gate runs on it)",
        "n2": "failed its verify gate (FAIL gpus: 7 of 8)",
        "n4": "taken out of service for a fault fmctl's node agent found (being repaired)",
    }


def test_a_node_without_advertised_gpus_is_said_not_checked() -> None:
    node = _node("n1")
    node["status"]["allocatable"] = {"cpu": "188"}
    chosen = select(node_states([node], []), ["gpu"], include_busy=True)
    assert chosen.chosen["gpu"] == []
    assert "NVIDIA device plugin" in chosen.skipped[0][2]


def _selection(count: int) -> Selection:
    nodes = [
        NodeState(f"ip-10-20-1-{i}.ec2.internal", "gpu", True, False, 8, 16) for i in range(count)
    ]
    return Selection({"gpu": nodes})


def test_check_objects_pass_official_schemas_and_hold_whole_nodes() -> None:
    context = _context("p5en-eks-fsx-s3.yaml")
    objects, jobs = node_manifests(context, _selection(3), "fmctl-check-abc", 900)
    names = [n.name for n in _selection(3).chosen["gpu"]]
    more, nccl = nccl_manifests(context, {"gpu": names}, "fmctl-check-abc")
    # Kueue's LocalQueue for the check's namespace first (its CRD's schema: test_kueue).
    assert more[0]["kind"] == "LocalQueue" and more[0]["spec"] == {"clusterQueue": "training"}
    objects += more[1:]
    for obj in objects:
        kubernetes_validate.validate(obj, "1.33.0", strict=True)
    kinds = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert kinds[:2] == [("Namespace", "fmctl-check-abc"), ("ConfigMap", "node-check")]
    assert all(
        o["metadata"].get("namespace", "fmctl-check-abc") == "fmctl-check-abc" for o in objects
    )
    assert objects[0]["metadata"]["labels"]["fmctl.dev/cluster"] == "h200-finetune"
    node_jobs = [o for o in objects if o["kind"] == "Job" and o["metadata"]["name"] in jobs]
    assert len(node_jobs) == 3 and nccl == {"gpu": "nccl-gpu"}
    for job in node_jobs:
        pod = job["spec"]["template"]["spec"]
        node = jobs[job["metadata"]["name"]].node
        term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [node]
        held = {
            kind: sum(c["resources"]["limits"].get(kind, 0) for c in pod["containers"])
            for kind in (GPU, EFA)
        }
        # All 8 GPUs and 16 EFA devices: the scheduler can place it only on a free node.
        assert (held[GPU], held[EFA]) == (8, 16)
        assert job["spec"]["activeDeadlineSeconds"] == 900 and job["spec"]["backoffLimit"] == 0
        assert pod["containers"][0]["command"] == ["bash", "/opt/fmctl/node-check.sh", "-", "gpu"]
        # DCGM's diagnostic on the node's one host engine (templates/kubernetes/dcgm), named,
        # on the node's network where it listens: never an engine of the check's own.
        env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
        assert env["FMCTL_DCGM_HOST"] == "127.0.0.1" and pod["hostNetwork"] is True
        assert "FMCTL_START_HOSTENGINE" not in env
    script = next(o for o in objects if o["kind"] == "ConfigMap")["data"]["node-check.sh"]
    assert script == (ROOT / "slurm/lib/node-check.sh").read_text()
    allreduce = next(
        o for o in objects if o["kind"] == "Job" and o["metadata"]["name"] == "nccl-gpu"
    )
    # Queued: Kueue lifts the suspension when the whole gang is admitted.
    assert allreduce["spec"]["suspend"] is True
    assert allreduce["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"
    assert allreduce["spec"]["completions"] == allreduce["spec"]["parallelism"] == 3
    pod = allreduce["spec"]["template"]["spec"]
    hosts = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert hosts["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == sorted(names)
    assert "--nnodes=3" in pod["containers"][0]["command"]
    assert "--master-addr=nccl-gpu-0.nccl-gpu" in pod["containers"][0]["command"]


def test_nccl_needs_two_nodes_that_passed() -> None:
    context = _context("p5en-eks-fsx-s3.yaml")
    assert nccl_manifests(context, {"gpu": ["only-one"]}, "ns") == ([], {})
    assert nccl_manifests(context, {}, "ns") == ([], {})
    assert nccl_step(context, {"gpu": ["a"]}, 600) == []
    step = nccl_step(context, {"gpu": ["ip-10-0-0-9", "ip-10-0-0-7"]}, 600)
    assert step == [
        "nccl",
        "--timeout",
        "600",
        "--shared",
        "/home/fmctl-check",
        "gpu:8:2:ip-10-0-0-[7,9]",
    ]


def test_the_nccl_log_goes_where_every_node_sees_it() -> None:
    """ParallelCluster NFS-shares /home; PCS shares nothing of its own: the log goes to the
    cluster's FSx, and without one the NCCL step is not run (check says why)."""
    import dataclasses

    from provisioner.check.slurm_gather import shared_folder

    pcluster = _context("p5-slurm-capacity-block.yaml")
    assert shared_folder(pcluster) == "/home/fmctl-check"
    pcs = dataclasses.replace(pcluster, slurm_provider="pcs")
    assert pcs.fsx is not None
    assert shared_folder(pcs) == f"{pcs.fsx.mount_path}/.fmctl-check"
    step = nccl_step(pcs, {"train": ["a-1", "a-2"]}, 60)
    assert step[step.index("--shared") + 1] == f"{pcs.fsx.mount_path}/.fmctl-check"
    bare = dataclasses.replace(pcs, fsx=None)
    assert shared_folder(bare) is None and nccl_step(bare, {"train": ["a-1", "a-2"]}, 60) == []


def test_hostlists_are_slurms_compressed_form() -> None:
    names = [f"train-st-p5-48xlarge-{i}" for i in (1, 2, 3, 5, 9, 10, 11)]
    assert hostlist(names) == "train-st-p5-48xlarge-[1-3,5,9-11]"
    assert hostlist(["a-1", "b-7", "login"]) == "login,a-1,b-7"
    assert hostlist([f"q-dy-p5-{i}" for i in range(1, 1001)]) == "q-dy-p5-[1-1000]"


def test_split_stream_writes_the_layout_and_follows_no_path(tmp_path: Path) -> None:
    text = (
        "noise before any frame\n"
        "==> fmctl-check n1 pool <==\ngpu\n"
        "==> fmctl-check n1 nvidia-smi.csv <==\n0, NVIDIA H200\n"
        "==> fmctl-check ../etc passwd <==\nnot followed\n"
        "==> fmctl-check-skipped n2 gpu <==\nbusy: a job holds it\n"
        "==> fmctl-check-nccl gpu <==\nsize=1 time_us=1 busbw_GBps=1\n"
    )
    skipped = split_stream(text, tmp_path)
    assert (tmp_path / "nodes/n1/pool").read_text() == "gpu\n"
    assert (tmp_path / "nodes/n1/nvidia-smi.csv").read_text() == "0, NVIDIA H200\n"
    assert (tmp_path / "nccl/gpu.txt").read_text().startswith("size=1")
    assert skipped == [("n2", "gpu", "busy: a job holds it")]
    written = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()}
    assert written == {"nodes/n1/pool", "nodes/n1/nvidia-smi.csv", "nccl/gpu.txt"}
    assert not any("not followed" in p.read_text() for p in tmp_path.rglob("*") if p.is_file())


def test_the_kubernetes_nccl_job_output_is_judged() -> None:
    pool = _context("p5en-eks-fsx-s3.yaml").pools[0]
    report = outputs.parse_nccl((DATA / "nccl-k8s-p5en-2nodes-healthy.txt").read_text())
    assert report.ranks == 16 and len(report.hosts) == 2
    assert report.largest is not None and report.largest.size_bytes == 4 * 2**30
    assert report.largest.busbw_gbs == pytest.approx(352.27)
    # algbw = busbw * n / (2(n-1)) for n = 16 ranks
    assert report.largest.algbw_gbs == pytest.approx(352.27 * 16 / 30)
    verdict = judge_nccl(pool, report)
    assert verdict.ok and verdict.findings[0].ok is True, verdict


def test_the_rendered_job_prints_what_the_parser_reads() -> None:
    text = (ROOT / "templates/kubernetes/nccl-test/job.yaml.j2").read_text()
    assert 'print(f"# nccl-allreduce ranks={world} nodes=' in text
    assert 'print(f"size={size} time_us={seconds * 1e6:.1f} busbw_GBps={busbw:.2f}"' in text


# -- the head-node script, against a fake Slurm -------------------------------------------


def _fake_slurm(tmp: Path, sinfo: str, broken: str) -> Path:
    (tmp / "sinfo.txt").write_text(sinfo)
    (tmp / "broken").write_text(broken + "\n")
    (tmp / "nccl.txt").write_text(recorded.nccl_p5_2nodes())
    return fakes.install(tmp / "bin", fakes.SLURM)


def _run(args: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(
        ["bash", "-c", command_script(args)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_head_node_script_checks_idle_nodes_only(tmp_path: Path) -> None:
    context = _context("p5-slurm-capacity-block.yaml")
    sinfo = (
        "train-st-p5-48xlarge-1 idle\n"
        "train-st-p5-48xlarge-2 alloc\n"
        "train-st-p5-48xlarge-3 idle\n"
        "train-st-p5-48xlarge-4 drain\n"
        "train-st-p5-48xlarge-5 idle\n"
    )
    bin_dir = _fake_slurm(tmp_path, sinfo, broken="train-st-p5-48xlarge-3")
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "FAKE": str(tmp_path),
        "DATA": str(DATA),
        "TMPDIR": str(tmp_path),
    }
    folder = tmp_path / "results"
    skipped = split_stream(_run(node_step(context, False, 600), env), folder)
    assert skipped == [
        ("train-st-p5-48xlarge-2", "train", "busy: a job holds it (--include-busy waits for it)"),
        ("train-st-p5-48xlarge-4", "train", "state drain"),
    ]
    calls = (tmp_path / "calls").read_text().splitlines()
    idle = "train-st-p5-48xlarge-1,train-st-p5-48xlarge-3,train-st-p5-48xlarge-5"
    (srun,) = calls
    for flag in (
        "--exclusive",
        f"--nodelist={idle}",
        "--nodes=3",
        "--ntasks-per-node=1",
        "--input=all",
        "--immediate=600",
    ):
        assert flag in shlex.split(srun), srun

    # NCCL goes across the nodes that passed: not the one with a GPU fallen off the bus.
    passed = passed_nodes(context, folder)
    assert passed == {"train": ["train-st-p5-48xlarge-1", "train-st-p5-48xlarge-5"]}
    step = nccl_step(context, passed, 600)
    # The shared folder fmctl names (here a folder of the test's, in place of /home's).
    step[step.index("--shared") + 1] = str(tmp_path / "shared")
    split_stream(_run(step, env), folder)
    sbatch = (tmp_path / "calls").read_text().splitlines()[-1]
    assert sbatch.startswith("sbatch")
    for flag in (
        "--exclusive",
        "--nodelist=train-st-p5-48xlarge-[1,5]",
        "--nodes=2",
        "--gpus-per-node=8",
        "--ntasks-per-node=8",
        "--deadline=now+1200",  # ten minutes to start, ten to run
    ):
        assert flag in shlex.split(sbatch), sbatch

    report = check_folder(context, folder)
    by_subject = {v.subject: v for v in report.verdicts}
    assert sorted(by_subject) == [
        "nccl all-reduce (train)",
        "train-st-p5-48xlarge-1",
        "train-st-p5-48xlarge-3",
        "train-st-p5-48xlarge-5",
    ]
    assert not by_subject["train-st-p5-48xlarge-3"].ok  # the GPU fallen off the bus
    assert by_subject["train-st-p5-48xlarge-1"].ok and by_subject["nccl all-reduce (train)"].ok
    assert not list((tmp_path / "shared").iterdir())  # the NCCL log was taken, not left


def test_the_head_node_script_with_include_busy(tmp_path: Path) -> None:
    context = _context("p5-slurm-capacity-block.yaml")
    sinfo = "train-st-p5-48xlarge-1 mix\ntrain-st-p5-48xlarge-2 down*\n"
    bin_dir = _fake_slurm(tmp_path, sinfo, "")
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "FAKE": str(tmp_path),
        "DATA": str(DATA),
        "TMPDIR": str(tmp_path),
    }
    skipped = split_stream(_run(node_step(context, True, 600), env), tmp_path / "results")
    assert skipped == [("train-st-p5-48xlarge-2", "train", "state down*")]
    assert (tmp_path / "results/nodes/train-st-p5-48xlarge-1/fi_info.txt").is_file()


def test_the_script_refuses_what_it_does_not_know(tmp_path: Path) -> None:
    script = ROOT / "slurm/lib/cluster-check.sh"
    for args in (
        ["nodes"],
        ["sideways", "train"],
        ["nccl", "train:8:2"],
        ["nodes", "--bogus", "x"],
    ):
        done = subprocess.run(["bash", str(script), *args], capture_output=True, text=True)
        assert done.returncode == 2 and done.stderr, args


def test_the_command_carries_the_scripts_it_runs() -> None:
    context = _context("p5-slurm-capacity-block.yaml")
    script = command_script(node_step(context, False, 900))
    for path in (
        "slurm/lib/cluster-check.sh",
        "slurm/lib/node-check.sh",
        "slurm/jobs/nccl-tests.sbatch",
    ):
        assert (ROOT / path).read_text().rstrip("\n") in script
    assert script.rstrip().endswith('cluster-check.sh" nodes --timeout 900 train')


class _StuckApi:
    """A cluster where the check's Jobs for ``stuck`` nodes, and every NCCL Job, never end."""

    def __init__(self, nodes: list[str], stuck: set[str]) -> None:
        self.nodes, self.stuck = nodes, stuck
        self.applied: list[dict[str, Any]] = []
        self.deleted: list[tuple[str, str]] = []
        self.log_reads: list[str | None] = []

    def apply(self, obj: dict[str, Any], force: bool = False) -> dict[str, Any]:
        self.applied.append(obj)
        return obj

    def _node_of(self, job: str) -> str | None:
        for obj in self.applied:
            if obj["kind"] == "Job" and obj["metadata"]["name"] == job:
                return obj["metadata"].get("annotations", {}).get("fmctl.dev/node")
        return None

    def get(self, api_version: str, kind: str, name: str, namespace: str = "") -> Any:
        node = self._node_of(name)
        done = node is not None and node not in self.stuck
        return {"status": {"conditions": [{"type": "Complete", "status": "True"}]} if done else {}}

    def list(self, api_version: str, kind: str, namespace: str = "", selector: str = "") -> Any:
        if kind == "Job":
            return [
                {**o, **self.get("batch/v1", "Job", o["metadata"]["name"])}
                for o in self.applied
                if o["kind"] == "Job"
            ]
        if kind == "Node":
            return [_node(n) for n in self.nodes]
        if kind == "Pod" and not selector:  # the namespace's pods, each labelled by its Job
            jobs = [o["metadata"]["name"] for o in self.applied if o["kind"] == "Job"]
            pods = [self.list("v1", "Pod", namespace, f"x={job}")[0] for job in jobs]
            for pod, job in zip(pods, jobs, strict=True):
                pod["metadata"]["labels"] = {"batch.kubernetes.io/job-name": job}
            return pods
        if kind == "Pod" and selector:
            job = selector.split(",")[0].split("=")[1]
            node = self._node_of(job)
            if node is None or node in self.stuck:
                return [{"metadata": {"name": f"{job}-x"}, "status": {"phase": "Pending"}}]
            return [
                {"metadata": {"name": f"{job}-x", "node": node}, "status": {"phase": "Succeeded"}}
            ]
        return []

    def logs(self, namespace: str, pod: str, container: str | None = None) -> str:
        """A check pod's container's log: the GPU part (DCGM's image) or the EFA part."""
        node = self._node_of(pod.removesuffix("-x")) or ""
        fi_info = (DATA / "fi_info-p5en-healthy.txt").read_text()
        parts = {
            "gpu": {
                "nvidia-smi.csv": (DATA / "nvidia-smi-p5en.csv").read_text(),
                "dcgmi-diag.json": (DATA / "dcgmi-diag-healthy.json").read_text(),
            },
            "efa": {"fi_info.txt": fi_info, "efa-devices.txt": efa_devices(fi_info)},
        }
        self.log_reads.append(container)
        files = {"pool": "gpu\n", **parts[container or "gpu"]}
        return "".join(f"==> fmctl-check {node} {name} <==\n{text}" for name, text in files.items())

    def delete(self, api_version: str, kind: str, name: str, namespace: str = "") -> bool:
        self.deleted.append((kind, name))
        return True


def test_what_does_not_finish_is_said_and_everything_is_deleted(tmp_path: Path) -> None:
    from provisioner.check.kube_gather import gather

    context = _context("p5en-eks-fsx-s3.yaml")
    api = _StuckApi(["n1", "n2", "n3"], stuck={"n3"})
    got = gather(api, context, tmp_path, timeout=0.3, sleep=lambda s: None)  # type: ignore[arg-type]
    assert [(n, why.split(" (")[0]) for n, _, why in got.skipped] == [
        ("n3", "its check did not finish within 0s")
    ]
    nccl = [o for o in api.applied if o["kind"] == "Job" and o["metadata"]["name"] == "nccl-gpu"]
    assert len(nccl) == 1 and nccl[0]["spec"]["completions"] == 2  # n1 and n2, which passed
    report = check_folder(context, tmp_path)
    verdicts = {v.subject: v for v in report.verdicts}
    assert verdicts["n1"].ok and verdicts["n2"].ok and "n3" not in verdicts
    # Each node's GPU and EFA parts come from their own containers' logs.
    assert api.log_reads.count("gpu") == api.log_reads.count("efa") == 2
    failed = verdicts["nccl all-reduce (gpu)"].failed()[0]
    assert "did not finish" in failed.detail
    assert api.deleted == [("Namespace", f"fmctl-check-{got.run}")]


def test_node_jobs_are_what_the_template_renders_for_each_node() -> None:
    """node_manifests renders one Job per shape and copies it per node: every copy equals the
    template rendered for that node itself (mixed shapes: with and without EFA)."""
    from provisioner.render.engine import render_template

    context = _context("p5en-eks-fsx-s3.yaml")
    pool = context.pools[0].name
    nodes = [
        NodeState("n1", pool, True, False, 8, 16),
        NodeState("n2", pool, True, False, 8, 16),
        NodeState("n3", pool, True, False, 8, 0),
    ]
    objects, jobs = node_manifests(context, Selection(chosen={pool: nodes}), "fmctl-check-x", 900)
    scripts = next(o for o in objects if o["kind"] == "ConfigMap")["data"]
    direct = yamlio.load_all(
        render_template(
            "kubernetes/check/node-check.yaml.j2",
            c=context,
            namespace="fmctl-check-x",
            jobs=list(jobs.values()),
            scripts=scripts,
            deadline=900,
        )
    )
    assert objects == [d for d in direct if d]


def _labelled(names: list[str], shared: int, ultra: str | None = None) -> dict[str, dict[str, str]]:
    """Node labels: the first ``shared`` network layers common to all, the rest each node's."""
    out = {}
    for i, name in enumerate(names):
        labels = {
            f"topology.k8s.aws/network-node-layer-{n}": "nn-a" if n <= shared else f"nn-{i}-{n}"
            for n in (1, 2, 3, 4)
        }
        labels["kubernetes.io/hostname"] = name
        if ultra:
            labels["fmctl.dev/ultraserver"] = ultra
        out[name] = labels
    return out


def test_check_nccl_requires_the_tightest_domain_its_nodes_share() -> None:
    """`fmctl check` knows its nodes: it asks Kueue for the innermost network level they
    all share (the committed job, rendered blind, can only ask for the outermost)."""
    context = _context("p6-b300-eks-capacity-block.yaml")
    names = ["n1", "n2"]
    for shared, level in (
        (3, "topology.k8s.aws/network-node-layer-3"),
        (1, "topology.k8s.aws/network-node-layer-1"),
    ):
        objects, _ = nccl_manifests(context, {"b300": names}, "ns", _labelled(names, shared))
        job = next(o for o in objects if o["kind"] == "Job")
        annotations = job["spec"]["template"]["metadata"]["annotations"]
        assert annotations == {"kueue.x-k8s.io/podset-required-topology": level}
    # Nodes that share no level: only a preference, at the top.
    objects, _ = nccl_manifests(context, {"b300": names}, "ns", _labelled(names, 0))
    job = next(o for o in objects if o["kind"] == "Job")
    assert job["spec"]["template"]["metadata"]["annotations"] == {
        "kueue.x-k8s.io/podset-preferred-topology": "topology.k8s.aws/network-node-layer-1"
    }


def test_check_nccl_on_gb200_eks_claims_a_compute_domain() -> None:
    validation = validate_text((ROOT / "tests/data/specs/gb200-eks.yaml").read_text())
    assert validation.ok and validation.resolved is not None
    context = build_context(validation.resolved, load_catalog())
    names = ["n1", "n2", "n3"]
    objects, jobs = nccl_manifests(context, {"nvl72": names}, "ns", _labelled(names, 3, "cb-1"))
    kinds = [o["kind"] for o in objects]
    assert kinds[0] == "LocalQueue" and "ComputeDomain" in kinds and jobs == {"nvl72": "nccl-nvl72"}
    job = next(o for o in objects if o["kind"] == "Job")
    pod = job["spec"]["template"]
    assert pod["metadata"]["annotations"] == {
        "kueue.x-k8s.io/podset-required-topology": "fmctl.dev/ultraserver"
    }
    assert pod["spec"]["resourceClaims"] == [
        {"name": "compute-domain-channel", "resourceClaimTemplateName": "nccl-nvl72-channel"}
    ]
