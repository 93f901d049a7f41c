"""The reliability campaign shares the engine tests' emulator fixtures."""

from tests.engine.conftest import no_faults, sandbox

__all__ = ["no_faults", "sandbox"]
