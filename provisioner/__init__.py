"""fmctl: GPU clusters for foundation-model training on AWS, from one spec.

The import package is ``provisioner``; the command is ``fmctl``. Importing this package
must stay cheap: heavy SDKs (boto3, kubernetes, pcluster) load only where they are used.

It holds the version and the root of fmctl's one error family, ``FmctlError``: every layer
derives its failures from it (the drivers too, which import nothing else of fmctl), since
this module is loaded before any of theirs anyway. The sandbox, a program of its own,
derives nothing from it.
"""

from typing import ClassVar

__version__ = "0.1.0"


class FmctlError(Exception):
    """A failure fmctl reports to a person: what happened (the message) and what to do about
    it (``hint``). The CLI turns every one of them into ``error:`` and ``hint:`` lines on
    stderr (``{"error": {"message", "hint", "kind"}}`` under ``-o json``) and exit status 1,
    in one place (``cli/common.py``); ``kind`` is the class's name."""

    #: The hint of a kind whose raiser gives none.
    default_hint: ClassVar[str | None] = None

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint if hint is not None else self.default_hint

    @property
    def kind(self) -> str:
        """The kind's name, as JSON output gives it."""
        return type(self).__name__


#: The hint of a failure that is fmctl's own bug, never the user's input.
BUG_HINT = "a bug in fmctl, not in the spec: FMCTL_DEBUG=1 shows where; please report it"


class FmctlBug(FmctlError):
    """fmctl contradicted itself (a template, the blueprint, the graph, a write while
    planning): nothing the user wrote or can change causes it."""

    default_hint = BUG_HINT
