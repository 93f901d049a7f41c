"""Start-up stays lean: `validate` imports no cloud SDK, no templates and no
importlib.metadata, and the stand-in for pydantic's plugin loader answers what the real one
answers when every plugin is disabled."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT

PROBE = (
    "import sys, runpy\n"
    "sys.argv = ['fmctl', 'validate', '-f', 'examples/p5-slurm-capacity-block.yaml']\n"
    "try:\n"
    "    runpy.run_module('provisioner', run_name='__main__')\n"
    "except SystemExit:\n"
    "    pass\n"
    "print(sorted(m for m in sys.modules if m.split('.')[0] in "
    "('boto3', 'botocore', 'jinja2', 'moto') or m == 'importlib.metadata'))\n"
)


def test_validate_imports_stay_lean() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_real_loader_finds_no_plugins_when_all_are_disabled() -> None:
    code = (
        "import os; os.environ['PYDANTIC_DISABLE_PLUGINS'] = '__all__'\n"
        "from pydantic.plugin._loader import get_plugins\n"
        "print(tuple(get_plugins()))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "()"
