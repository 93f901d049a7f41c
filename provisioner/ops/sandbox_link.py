"""How the product reaches the sandbox emulator: a separate package (``fmctl_sandbox``,
installed with ``fmctl[sandbox]``), found through its ``fmctl.sandbox`` entry point and never
imported by name, so fmctl runs without it and the emulator can ship on its own. The product
knows the sandbox only as ``SandboxClient``: start it, its key pair, ask it, stop it; the
``Target`` it yields carries only an endpoint, a CA bundle, credentials and a time scale."""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from provisioner import FmctlError

T = TypeVar("T")

#: The entry point group and name the sandbox package registers (pyproject.toml).
GROUP, NAME = "fmctl.sandbox", "client"


class KeyPair(Protocol):
    """The sandbox's credentials (its emulator accepts no others)."""

    @property
    def access_key(self) -> str: ...

    @property
    def secret_key(self) -> str: ...


class SandboxClient(Protocol):
    """What the product calls of the sandbox (its ``daemon`` module)."""

    @property
    def SandboxError(self) -> type[Exception]:
        """What the sandbox raises when its emulator cannot be started or reached."""
        ...

    def ensure(self, home: Path) -> tuple[str, float, str]:
        """The emulator's endpoint, time scale and CA bundle, started if need be."""
        ...

    def credentials(self, home: Path) -> KeyPair:
        """The running sandbox's key pair."""
        ...

    def running(self, home: Path) -> dict[str, Any] | None:
        """The running emulator's address record, or None."""
        ...

    def call(
        self,
        info: dict[str, Any],
        creds: Any,
        action: str,
        body: dict[str, Any] | None = None,
        region: str = "us-east-1",
    ) -> dict[str, Any]:
        """One of the sandbox's own operations (seeding, faults, its clock)."""
        ...

    def stop(self, home: Path) -> bool:
        """Stop the emulator; True when one ran."""
        ...


class SandboxUnavailable(FmctlError):
    """The sandbox's emulator could not be started or reached (its ``SandboxError``: the
    sandbox, a separate program, derives nothing from fmctl)."""

    default_hint = "its log is sandbox/server.log under FMCTL_HOME (~/.fmctl by default)"


class SandboxMissing(SandboxUnavailable):
    """`--sandbox` was asked for where the sandbox package is not installed."""

    default_hint = "pip install 'fmctl[sandbox]' (the emulator is a package of its own)"


class Sandbox:
    """The installed sandbox, its failures as fmctl's (``SandboxUnavailable``)."""

    def __init__(self, client: SandboxClient) -> None:
        self._client = client

    def _run(self, call: Callable[[], T]) -> T:
        try:
            return call()
        except self._client.SandboxError as exc:
            raise SandboxUnavailable(str(exc)) from exc

    def ensure(self, home: Path) -> tuple[str, float, str]:
        """The emulator's endpoint, time scale and CA bundle, started if need be."""
        return self._run(lambda: self._client.ensure(home))

    def credentials(self, home: Path) -> KeyPair:
        """The running sandbox's key pair."""
        return self._run(lambda: self._client.credentials(home))

    def running(self, home: Path) -> dict[str, Any] | None:
        """The running emulator's address record, or None."""
        return self._run(lambda: self._client.running(home))

    def ask(
        self, home: Path, action: str, body: dict[str, Any], region: str = "us-east-1"
    ) -> dict[str, Any]:
        """One of the running sandbox's own operations; its answer."""
        info = self.running(home)
        if info is None:
            raise SandboxUnavailable(f"no sandbox runs for {home}")
        keys = self.credentials(home)
        return self._run(lambda: self._client.call(info, keys, action, body, region))

    def stop(self, home: Path) -> bool:
        """Stop the emulator; True when one ran."""
        return self._run(lambda: self._client.stop(home))


def sandbox() -> Sandbox:
    """The installed sandbox (``SandboxMissing`` when there is none)."""
    found = entry_points(group=GROUP, name=NAME)
    if not found:
        raise SandboxMissing("the sandbox is not installed")
    return Sandbox(cast(SandboxClient, next(iter(found)).load()))


def is_sandbox_error(exc: BaseException) -> bool:
    """``exc`` is the sandbox's own failure (which derives nothing from fmctl). Only a
    loaded sandbox can have raised one: nothing is imported to tell."""
    found = entry_points(group=GROUP, name=NAME)
    loaded = sys.modules.get(next(iter(found)).module) if found else None
    error = getattr(loaded, "SandboxError", None)
    return isinstance(error, type) and isinstance(exc, error)


if TYPE_CHECKING:
    # mypy holds the sandbox's module to the protocol the product calls it through.
    import fmctl_sandbox.daemon

    _CONFORMS: SandboxClient = fmctl_sandbox.daemon
