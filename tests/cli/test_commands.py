"""The other commands: --help, --version, init, catalog, schema; and lazy imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from provisioner import __version__
from provisioner.catalog import load_catalog
from tests.cli.helpers import ROOT, fmctl
from tests.conftest import EXAMPLES

GPU_TYPES = [t.name for t in load_catalog().types.values() if t.is_gpu]


def test_help_lists_commands() -> None:
    result = fmctl("--help")
    assert result.returncode == 0
    for name in ("init", "validate", "catalog", "schema"):
        assert f"  {name}" in result.stdout


def test_version() -> None:
    assert fmctl("--version").stdout.strip() == f"fmctl, version {__version__}"


def test_unknown_command_suggests() -> None:
    result = fmctl("valdate")
    assert result.returncode == 2 and "Did you mean 'validate'?" in result.stderr


def _loaded_modules(*args: str) -> set[str]:
    code = (
        "import sys\nfrom provisioner.cli.main import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print('\\n'.join(sys.modules), file=sys.stderr)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        timeout=60,
    )
    return set(result.stderr.split())


def test_help_imports_nothing_heavy() -> None:
    loaded = _loaded_modules("--help")
    assert not loaded & {"pydantic", "yaml", "rich", "boto3", "botocore", "kubernetes", "jinja2"}


def test_validate_imports_no_cloud_sdk() -> None:
    loaded = _loaded_modules("validate", "-f", str(EXAMPLES[0]))
    assert "pydantic" in loaded  # sanity: the probe sees real imports
    assert not loaded & {"boto3", "botocore", "kubernetes", "rich", "jinja2"}


@pytest.mark.parametrize("scheduler", ["slurm", "kubernetes"])
@pytest.mark.parametrize("itype", GPU_TYPES)
def test_init_output_validates(tmp_path: Path, scheduler: str, itype: str) -> None:
    count = "18" if load_catalog()[itype].ultra_server else "4"
    result = fmctl("init", "--scheduler", scheduler, "--instance-type", itype, "--count", count)
    assert result.returncode == 0, result.stderr
    path = tmp_path / "spec.yaml"
    path.write_text(result.stdout)
    check = fmctl("validate", "-f", str(path))
    assert check.returncode == 0, check.stderr
    # Not even a warning: on EKS, GB200 gets NVIDIA's DRA driver (the default version is
    # 1.33+) and Kueue can admit its ComputeDomain claims (1.34+).
    assert check.stderr == "", check.stderr
    spec = yaml.safe_load(result.stdout)
    assert spec["scheduler"] == scheduler
    if scheduler == "kubernetes":  # one architecture: Graviton system nodes for arm64 pools
        arm = load_catalog()[itype].architecture == "arm64"
        want = "m7g.2xlarge" if arm else "m7i.2xlarge"
        assert spec["compute"]["systemNodes"]["instanceType"] == want
    assert spec["compute"]["gpuPools"][0] == {
        **spec["compute"]["gpuPools"][0],
        "instanceType": itype,
        "count": int(count),
    }


def test_init_refuses_an_ultraserver_count_no_block_has() -> None:
    result = fmctl("init", "--scheduler", "slurm", "--instance-type", "p6e-gb200.36xlarge")
    assert result.returncode == 1
    assert "9 or 18 instances, not 2" in result.stderr and "--count 18" in result.stderr


def test_init_rejects_unknown_type() -> None:
    result = fmctl("init", "--scheduler", "slurm", "--instance-type", "p5.48xl")
    assert result.returncode == 1
    assert "did you mean 'p5.48xlarge'?" in result.stderr


def test_catalog_table_and_family() -> None:
    result = fmctl("catalog", "--family", "p6", env={"COLUMNS": ""})  # piped: every column
    assert result.returncode == 0
    assert "p6-b300.48xlarge" in result.stdout and "p5.48xlarge" not in result.stdout
    assert "ENA-only: 0" in result.stdout


def test_catalog_json_carries_sources() -> None:
    data = json.loads(fmctl("catalog", "-o", "json", "--all").stdout)
    names = {t["name"] for t in data["types"]}
    assert {"p5.48xlarge", "p6-b300.48xlarge", "m7i.4xlarge"} <= names
    for entry in data["types"]:
        for group in ("cpu", "gpu", "nvlink", "network", "local_nvme"):
            if entry[group] is not None:
                assert entry[group]["source"] in data["sources"], (entry["name"], group)


def test_catalog_unknown_family() -> None:
    result = fmctl("catalog", "--family", "z9")
    assert result.returncode == 2 and "families:" in result.stderr


def test_schema_accepts_examples_and_rejects_typos() -> None:
    schema = json.loads(fmctl("schema").stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for example in EXAMPLES:
        errors = list(validator.iter_errors(yaml.safe_load(example.read_text())))
        assert errors == [], (example.name, errors[:1])
    bad = yaml.safe_load(EXAMPLES[0].read_text())
    bad["compute"]["gpuPools"][0]["efaa"] = True
    assert list(validator.iter_errors(bad))


@pytest.mark.parametrize(
    "args",
    [
        ("down", "Bad Name!", "--yes"),
        ("status", "Bad Name!"),
        ("topology", "a"),
        ("check", "9lives"),
        ("history", "UPPER"),
        ("unlock", "two--dashes"),
        ("down", "ends-with-", "--sandbox", "--yes"),
        ("token", "--cluster", "Bad Name!", "--region", "us-east-1"),
    ],
)
def test_a_name_no_cluster_can_have_is_refused_before_any_call(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    # Any AWS call would go to a closed port (or start a sandbox under FMCTL_HOME).
    env = {
        "FMCTL_HOME": str(tmp_path / "home"),
        "AWS_ENDPOINT_URL": "https://127.0.0.1:9",
        "AWS_ACCESS_KEY_ID": "AKIAFAKEFAKEFAKEFAKE",
        "AWS_SECRET_ACCESS_KEY": "fake",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    result = fmctl(*args, env=env)
    assert result.returncode == 1, result.stderr
    label, name = ("--cluster", args[2]) if args[1] == "--cluster" else ("NAME", args[1])
    assert f"error: {label}: {name!r} is not a cluster name" in result.stderr
    assert "hint: 3-40 characters" in result.stderr
    assert "Traceback" not in result.stderr and "report it" not in result.stderr
    assert not (tmp_path / "home").exists()


@pytest.mark.parametrize("args", [("catalog", "-o", "json"), ("history", "nothing-here")])
def test_a_closed_pipe_is_quiet(tmp_path: Path, args: tuple[str, ...]) -> None:
    # `fmctl ... | head` with the reader gone before the first write: no traceback, and no
    # "please report it" (history, a guarded command, once said that of EPIPE).
    import os

    read, write = os.pipe()
    os.close(read)
    proc = subprocess.Popen(
        [sys.executable, "-m", "provisioner", *args],
        stdout=write,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "FMCTL_HOME": str(tmp_path)},
    )
    os.close(write)
    _, err = proc.communicate(timeout=60)
    assert err == b""
    assert proc.returncode != 0


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts_call_fmctl_back(shell: str) -> None:
    script = fmctl("completion", shell)
    assert script.returncode == 0, script.stderr
    assert f"_FMCTL_COMPLETE={shell}_" in script.stdout.replace('"', "")


def test_completion_answers_commands_and_options() -> None:
    def complete(words: str) -> list[str]:
        env = {"_FMCTL_COMPLETE": "bash_complete", "COMP_WORDS": words}
        env["COMP_CWORD"] = str(len(words.split()) - 1)
        done = fmctl(env=env)
        assert done.returncode == 0, done.stderr
        return [line.split(",", 1)[1] for line in done.stdout.splitlines()]

    assert complete("fmctl sta") == ["status", "state"]
    assert complete("fmctl status --ou") == ["--output"]
    assert "kubeconfig" in complete("fmctl k")


def test_catalog_family_is_case_insensitive() -> None:
    upper, lower = fmctl("catalog", "--family", "P5EN"), fmctl("catalog", "--family", "p5en")
    assert upper.returncode == 0 and upper.stdout == lower.stdout


@pytest.mark.parametrize("columns", [80, 120, 160, 250])
def test_catalog_table_fits_the_terminal(columns: int) -> None:
    """Every line fits the terminal's width; narrower terminals keep the telling columns and
    name the ones left out; piped output (no COLUMNS) has every column."""
    result = fmctl("catalog", env={"COLUMNS": str(columns), "NO_COLOR": "1"})
    assert result.returncode == 0, result.stderr
    assert max(len(line) for line in result.stdout.splitlines()) <= columns
    assert "p5en.48xlarge" in result.stdout and "EFA" in result.stdout
    if columns < 190:
        said = " ".join(result.stdout.split())  # the note wraps at the terminal's width
        assert f"left out to fit {columns} columns:" in said
        assert "HBM BW/GPU" in said and "vCPU" in said
    assert "\x1b[" not in result.stdout  # NO_COLOR: no escape codes


def test_catalog_piped_has_every_column() -> None:
    result = fmctl("catalog", env={"COLUMNS": ""})
    assert "PFLOPS/GPU" in result.stdout and "left out" not in result.stdout


@pytest.mark.parametrize("itype", ["p5.48xlarge", "p6-b200.48xlarge", "p6e-gb200.36xlarge"])
def test_init_for_pcs_validates(tmp_path: Path, itype: str) -> None:
    """The PCS starter: a Slurm version PCS still creates clusters on, whose sample AMI runs
    the type's GPUs (p6-b200: R570+), an AMI to fill in for UltraServers; only pcs-lacks'
    warning (what PCS clusters do not get)."""
    count = "18" if load_catalog()[itype].ultra_server else "2"
    result = fmctl(
        "init",
        "--scheduler",
        "slurm",
        "--provider",
        "pcs",
        "--instance-type",
        itype,
        "--count",
        count,
    )
    assert result.returncode == 0, result.stderr
    path = tmp_path / "spec.yaml"
    path.write_text(result.stdout)
    check = fmctl("validate", "-f", str(path), "-o", "json")
    assert check.returncode == 0, check.stdout + check.stderr
    found = json.loads(check.stdout)
    codes = {p["code"] for p in found.get("problems", [])}
    assert codes == {"pcs-lacks"}, found
    spec = yaml.safe_load(result.stdout)
    assert spec["slurm"]["provider"] == "pcs"
    assert ("amiId" in spec["slurm"]) == load_catalog()[itype].ultra_server


def test_shell_completion_offers_the_clusters_this_machine_knows(tmp_path: Path) -> None:
    for name in ("alpha", "alpine", "beta"):
        (tmp_path / "clusters" / name).mkdir(parents=True)
    env = {
        "COMP_WORDS": "fmctl status al",
        "COMP_CWORD": "2",
        "_FMCTL_COMPLETE": "bash_complete",
        "FMCTL_HOME": str(tmp_path),
    }
    done = fmctl(env=env)
    assert done.stdout.split() == ["plain,alpha", "plain,alpine"], done.stdout + done.stderr
