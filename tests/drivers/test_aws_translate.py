"""botocore's configuration errors become plain messages with what to do, at the CLI too:
an unknown profile, no credentials, an expired SSO session. None of these reaches AWS."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from botocore import exceptions

from provisioner.drivers.aws import translate


@pytest.mark.parametrize(
    ("error", "hint"),
    [
        (exceptions.ProfileNotFound(profile="team"), "aws configure list-profiles"),
        (exceptions.NoCredentialsError(), "--sandbox"),
        (exceptions.UnauthorizedSSOTokenError(), "aws sso login"),
        (exceptions.TokenRetrievalError(provider="sso", error_msg="expired"), "aws sso login"),
        (exceptions.NoRegionError(), "--region"),
        (exceptions.EndpointConnectionError(endpoint_url="https://ec2.x"), "the network"),
        (exceptions.ConnectTimeoutError(endpoint_url="https://ec2.x"), "HTTPS_PROXY"),
        (exceptions.ReadTimeoutError(endpoint_url="https://ec2.x"), "resume"),
    ],
)
def test_setup_errors_get_a_hint(error: Exception, hint: str) -> None:
    translated = translate(error, "fmctl status")
    assert str(translated).startswith("fmctl status: ") and str(error) in str(translated)
    assert translated.hint is not None and hint in translated.hint


def _fmctl(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    extra = env or {}
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    (tmp_path / "config").write_text("[default]\nregion = us-east-1\n")
    env.update(
        AWS_CONFIG_FILE=str(tmp_path / "config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "credentials"),
        AWS_EC2_METADATA_DISABLED="true",
        FMCTL_HOME=str(tmp_path / "home"),
    )
    env.update(extra)
    return subprocess.run(
        [sys.executable, "-m", "provisioner", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_an_unknown_profile_at_the_command_line(tmp_path: Path) -> None:
    done = _fmctl(tmp_path, "status", "cluster-one", "--region", "us-east-1", "--profile", "nobody")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "The config profile (nobody) could not be found" in done.stderr
    assert "hint: `aws configure list-profiles`" in done.stderr
    assert "Traceback" not in done.stderr and "report it" not in done.stderr


def test_no_credentials_at_the_command_line(tmp_path: Path) -> None:
    done = _fmctl(tmp_path, "status", "cluster-one", "--region", "us-east-1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Unable to locate credentials" in done.stderr and "--sandbox" in done.stderr
    assert "Traceback" not in done.stderr and "report it" not in done.stderr


def test_an_endpoint_that_does_not_answer_at_the_command_line(tmp_path: Path) -> None:
    """A closed port on loopback (never AWS): a plain message naming the endpoint, what to
    check, no traceback and no "report it"."""
    import socket

    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (tmp_path / "credentials").write_text(
        "[default]\naws_access_key_id = AKIDEXAMPLE\naws_secret_access_key = fake\n"
    )
    done = _fmctl(
        tmp_path,
        "status",
        "cluster-one",
        "--region",
        "us-east-1",
        env={"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_MAX_ATTEMPTS": "1"},
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Could not connect to the endpoint URL" in done.stderr, done.stderr
    assert "hint: the endpoint did not answer: check the network" in done.stderr
    assert "Traceback" not in done.stderr and "report it" not in done.stderr
