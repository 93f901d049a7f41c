"""`fmctl render --from-cluster` in the sandbox: the folder as committed for Argo CD and Flux.

After `up`, every placeholder is filled with the live cluster's ids (found by tag, with
read-only calls), nothing of the `<fmctl:` syntax is left anywhere, PLACEHOLDERS.md says where
each value came from, the Argo CD and Flux files point at the folder as it sits in its Git
repository, and a real kustomize (kubectl's, fetched by `make tools`) builds kubernetes/.
Before `up`, it refuses and writes nothing."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from provisioner.drivers import yamlio
from tests.conftest import ROOT, fetched_tool
from tests.engine.harness import Sandbox, owned, raw_leftovers, region_of, spec_file
from tests.engine.test_day2 import writes

NAME = "e2e-gitops"
REPO = "https://github.com/acme/clusters.git"


def _texts(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): p.read_text()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_render_from_cluster_fills_the_folder_for_gitops(sandbox: Sandbox, tmp_path: Path) -> None:
    spec = spec_file(tmp_path, NAME, gitops={"repoUrl": REPO, "revision": "prod"})
    region = region_of(spec)
    repo = tmp_path / "clusters-repo"
    (repo / ".git").mkdir(parents=True)  # the work tree the folder is committed in
    out = repo / "eks" / NAME

    before = sandbox.fmctl("render", "-f", str(spec), "-o", str(out), "--from-cluster", "--sandbox")
    assert before.returncode == 1, before.stdout + before.stderr
    assert f"no cluster {NAME} exists in {region}" in before.stderr
    assert "Traceback" not in before.stderr and not out.exists()

    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        calls = len(sandbox.requests())
        done = sandbox.fmctl(
            "render", "-f", str(spec), "-o", str(out), "--from-cluster", "--sandbox"
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert writes(sandbox.requests()[calls:]) == [], "render --from-cluster must only read"
        assert "the folder holds no placeholder" in done.stdout

        files = _texts(out)
        left = {path: text.count("<fmctl:") for path, text in files.items() if "<fmctl:" in text}
        assert left == {}, left
        ids = {logical: aws_id for _, logical, aws_id in owned(sandbox, NAME, region)}
        volume = yamlio.load_all(files["kubernetes/fsx/volume.yaml"])
        pv = next(d for d in volume if d["kind"] == "PersistentVolume")
        assert pv["spec"]["csi"]["volumeHandle"] == ids["fsx"]
        nodegroup = yaml.safe_load(files["aws/nodegroups/gpu.yaml"])
        assert nodegroup["launchTemplate"]["id"] == ids["launch-template/gpu"]
        assert ids["subnet/private"] in files["kubernetes/fsx/storageclass.yaml"]
        # Where each value came from, by resource.
        assert f"`{ids['sg/efa']}`" in files["PLACEHOLDERS.md"]
        assert "`sg/efa` id" in files["PLACEHOLDERS.md"]

        # Argo CD and Flux read the folder where it sits in the repository (the stack's
        # Application is the last: Kueue's chart, from its registry, syncs first).
        apps = list(yamlio.load_all(files["gitops/argocd-application.yaml"]))
        app = apps[-1]["spec"]["source"]
        assert app == {"repoURL": REPO, "targetRevision": "prod", "path": f"eks/{NAME}/kubernetes"}
        assert apps[0]["spec"]["source"]["repoURL"] == "oci://registry.k8s.io/kueue/charts/kueue"
        flux = list(yamlio.load_all(files["gitops/flux-kustomization.yaml"]))
        (git,) = [d for d in flux if d["kind"] == "GitRepository"]
        assert git["spec"]["url"] == REPO and git["spec"]["ref"] == {"branch": "prod"}
        kustomizations = {d["metadata"]["name"]: d for d in flux if d["kind"] == "Kustomization"}
        assert kustomizations[f"fmctl-{NAME}"]["spec"]["path"] == f"./eks/{NAME}/kubernetes"
        charts = kustomizations[f"fmctl-{NAME}-charts"]
        assert charts["spec"]["path"] == f"./eks/{NAME}/gitops/flux"

        built = subprocess.run(
            [fetched_tool("kubectl"), "kustomize", str(out / "kubernetes")],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert built.returncode == 0, built.stderr
        kinds = {d["kind"] for d in yamlio.load_all(built.stdout) if d}
        assert {"Namespace", "DaemonSet", "PersistentVolume", "StorageClass"} <= kinds
        assert "Job" not in kinds, "the NCCL test is run on demand, not synced"
    finally:
        # --keep-logs: the control-plane log group stays, released (no longer the cluster's,
        # so no later down or gc takes it), named with how to delete it.
        down = sandbox.fmctl("down", NAME, "--region", region, "--sandbox", "--yes", "--keep-logs")
        assert down.returncode == 0, down.stdout + down.stderr
    group = f"/aws/eks/{NAME}/cluster"
    assert f"kept log group {group}" in down.stderr
    assert f"aws logs delete-log-group --log-group-name {group}" in down.stderr
    # It says what the kept group blocks: a new cluster of the name, as `up` refuses it.
    assert f"`up` refuses a new cluster named {NAME} in {region}" in down.stderr
    refused = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert (
        refused.returncode == 1 and f"log group {group} exists" in refused.stdout + refused.stderr
    )
    assert raw_leftovers(sandbox, NAME, region) == []
    logs = sandbox.aws(region).client("logs")
    (kept,) = logs.describe_log_groups(logGroupNamePrefix=group)["logGroups"]
    tags = logs.list_tags_for_resource(resourceArn=kept["logGroupArn"])["tags"]
    # The spec's own tags stay; none of fmctl's but where it came from.
    assert tags == {"team": "applied-ml", "fmctl.dev/retained-from": NAME}
    assert raw_leftovers(sandbox, NAME, region) == []
    again = sandbox.fmctl("down", NAME, "--region", region, "--sandbox", "--yes")
    assert "nothing tagged" in again.stdout, again.stdout + again.stderr


def test_in_cluster_stack_gitops_hands_kubernetes_over(sandbox: Sandbox, tmp_path: Path) -> None:
    """`inClusterStack: gitops`: `up` makes everything on the AWS side, writes the kubeconfig
    and the filled folder, and applies nothing in the cluster. What Argo CD applies (here: a
    client that marks it as Argo CD does) `status` reports; switched back to `fmctl`, `up`
    applies the rest and leaves Argo CD's object to it."""
    from provisioner.resources.kube_stack import ARGO_ANNOTATION, DIGEST
    from tests.engine.harness import kube_client

    name = "e2e-handover"
    data = yaml.safe_load((ROOT / "examples" / "p5en-eks-fsx-s3.yaml").read_text())
    data["metadata"]["name"] = name
    data["kubernetes"]["inClusterStack"] = "gitops"
    data["gitops"] = {"repoUrl": REPO, "path": f"eks/{name}"}
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    region = data["metadata"]["region"]

    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        folder = sandbox.home / "clusters" / name / "deployment"
        assert f"the filled folder is {folder}" in up.stdout
        files = _texts(folder)
        assert not [p for p, t in files.items() if "<fmctl:" in t]
        app = list(yamlio.load_all(files["gitops/argocd-application.yaml"]))[-1]["spec"]
        assert app["source"]["path"] == f"eks/{name}/kubernetes"
        assert (sandbox.home / "clusters" / name / "kubeconfig").is_file()

        # Before Argo CD syncs, the GPU nodes run without their device plugins: not healthy,
        # and status says which nodes and why.
        early = sandbox.fmctl("status", name, "--region", region, "--sandbox", "-o", "json")
        kube = json.loads(early.stdout)["kubernetes"]
        assert kube["healthy"] is False
        short = {u["node"]: u["why"] for u in kube["unhealthy"]}
        gpu_nodes = [n["name"] for p in kube["pools"] if p["pool"] == "gpu" for n in p["nodes"]]
        assert gpu_nodes and set(short) == set(gpu_nodes)
        assert all(
            w == "advertises 0 nvidia.com/gpu, expected 8; advertises 0 vpc.amazonaws.com/efa, "
            "expected 16"
            for w in short.values()
        ), short
        text = sandbox.fmctl("status", name, "--region", region, "--sandbox")
        assert "! advertises 0 nvidia.com/gpu, expected 8" in text.stdout
        argo = kube_client(sandbox, name, region, manager="argocd-controller")
        try:
            assert argo.list("apps/v1", "DaemonSet", selector=f"fmctl.dev/cluster={name}") == []
            # Argo CD syncs the namespaces and one object of the folder, marked as its own.
            for doc in yamlio.load_all(files["kubernetes/namespaces/namespaces.yaml"]):
                if doc:
                    argo.apply(doc)
            (plugin,) = [
                d
                for d in yamlio.load_all(files["kubernetes/nvidia-device-plugin/daemonset.yaml"])
                if d and d["kind"] == "DaemonSet"
            ]
            plugin["metadata"].setdefault("annotations", {})[ARGO_ANNOTATION] = (
                f"fmctl-{name}:apps/DaemonSet:fmctl-system/nvidia-device-plugin"
            )
            # The folder committed before the spec moved the plugin on: an older image.
            (container,) = plugin["spec"]["template"]["spec"]["containers"]
            rendered_image = container["image"]
            container["image"] = "nvcr.io/nvidia/k8s-device-plugin:v0.14.0"
            argo.apply(plugin)
        finally:
            argo.close()

        again = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
        assert again.returncode == 0, again.stdout + again.stderr
        assert "nothing to change" in again.stdout
        # What Argo CD applies is not what the spec renders: up and plan say so, and what
        # to do; fmctl never applies over it.
        stale = f"what Argo CD (fmctl-{name}) applies is out of date with the spec"
        assert stale in again.stderr, again.stderr
        assert (
            "DaemonSet/fmctl-system/nvidia-device-plugin "
            "(spec.template.spec.containers[nvidia-device-plugin].image)" in again.stderr
        ), again.stderr
        assert "re-render (`fmctl render --from-cluster`) and commit" in again.stderr
        planned = sandbox.fmctl("plan", "-f", str(spec), "--sandbox")
        assert stale in planned.stdout, planned.stdout
        synced = sandbox.fmctl("status", name, "--region", region, "--sandbox", "-o", "json")
        whys = {u["why"] for u in json.loads(synced.stdout)["kubernetes"]["unhealthy"]}
        assert whys == {"advertises 0 vpc.amazonaws.com/efa, expected 16"}, whys
        assert rendered_image != container["image"]
        # With -o json, stdout is JSON lines only: the hand-over is one of them.
        as_json = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", "-o", "json")
        assert as_json.returncode == 0, as_json.stdout + as_json.stderr
        lines = [json.loads(line) for line in as_json.stdout.splitlines()]
        (handed,) = [d["gitops"] for d in lines if "gitops" in d]
        assert handed["folder"] == str(folder) and handed["path"] == f"eks/{name}"
        status = sandbox.fmctl("status", name, "--region", region, "--sandbox", "-o", "json")
        stack = {r["name"] for r in json.loads(status.stdout)["kubernetes"]["stack"]}
        assert "nvidia-device-plugin" in stack

        # Back to fmctl: it applies the rest, and leaves Argo CD's DaemonSet as it is.
        data["kubernetes"]["inClusterStack"] = "fmctl"
        spec.write_text(yaml.safe_dump(data, sort_keys=False))
        back = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
        assert back.returncode == 0, back.stdout + back.stderr
        said = back.stdout + back.stderr
        assert "nvidia-device-plugin is applied by Argo CD" in said, said
        api = kube_client(sandbox, name, region)
        try:
            mine = api.get("apps/v1", "DaemonSet", "efa-device-plugin", "fmctl-system")
            theirs = api.get("apps/v1", "DaemonSet", "nvidia-device-plugin", "fmctl-system")
        finally:
            api.close()
        assert mine is not None and DIGEST in mine["metadata"]["annotations"]
        assert theirs is not None and DIGEST not in theirs["metadata"].get("annotations", {})
        assert {f["manager"] for f in theirs["metadata"]["managedFields"]} == {"argocd-controller"}
    finally:
        down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
        assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, name, region) == []
