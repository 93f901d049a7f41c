"""What the tags every resource carries say, and which of them a plan may change."""

from __future__ import annotations

from provisioner.resources.tags import (
    CREATED_TAG,
    OWNER_TAG,
    STATE_TAG,
    DesiredTags,
    Tags,
    tag_change,
)


def test_the_shared_state_is_given_at_creation_and_never_planned() -> None:
    """A run whose state is shared creates every resource naming it (so a machine that
    knows nothing of the team state finds the lock); a plan neither asks for the tag nor
    takes it off a resource `state push` marked: the state commands own it."""
    want = DesiredTags((("team", "ml"),), "c1", "vpc", state="s3://acme-state/team")
    made = want.at_creation(0.0)
    assert made[STATE_TAG] == "s3://acme-state/team" and made[OWNER_TAG] == "c1"
    assert STATE_TAG not in want.resolve(made[CREATED_TAG]).as_dict()
    assert tag_change(want.resolve(made[CREATED_TAG]), Tags.of(made)) is None
    local = DesiredTags((("team", "ml"),), "c1", "vpc")
    assert STATE_TAG not in local.at_creation(0.0)
    marked = Tags.of({**local.at_creation(0.0), STATE_TAG: "s3://acme-state/team"})
    assert tag_change(local.resolve(made[CREATED_TAG]), marked) is None
    # Any other fmctl tag the spec no longer asks for still goes.
    stale = Tags.of({**local.at_creation(0.0), "fmctl.dev/old": "x"})
    assert tag_change(local.resolve(made[CREATED_TAG]), stale) == (
        {"fmctl.dev/old": "x"},
        {"fmctl.dev/old": None},
    )
