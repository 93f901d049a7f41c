"""What `gc` picks: expired clusters; by age, never one whose ttl says it is still wanted
(unless --ignore-ttl); and only those carrying every --tag."""

from __future__ import annotations

from provisioner.ops.gc import ClusterSeen, select

NOW = 1_000_000.0
HOUR = 3600.0


def _seen(name: str, age_h: float, ttl_h: float | None, team: str = "a") -> ClusterSeen:
    created = NOW - age_h * HOUR
    return ClusterSeen(
        name,
        resources=3,
        created_at=created,
        expires_at=None if ttl_h is None else created + ttl_h * HOUR,
        tags={"team": {team}},
        region="us-east-1",
    )


SEEN = {
    c.name: c
    for c in (
        _seen("wanted", age_h=7, ttl_h=72),  # old, but its ttl has days to go
        _seen("lapsed", age_h=7, ttl_h=2),  # its ttl passed
        _seen("no-ttl", age_h=7, ttl_h=None),
        _seen("young", age_h=1, ttl_h=None, team="b"),
    )
}


def _names(**kwargs: object) -> list[str]:
    return [c.name for c in select(SEEN, now=NOW, **kwargs)]  # type: ignore[arg-type]


def test_by_age_never_reaps_a_cluster_whose_ttl_has_not_passed() -> None:
    assert _names(expired=False, older_than=6 * HOUR) == ["lapsed", "no-ttl"]
    assert _names(expired=False, older_than=6 * HOUR, ignore_ttl=True) == [
        "lapsed",
        "no-ttl",
        "wanted",
    ]


def test_expired_and_tag_filters() -> None:
    assert _names(expired=True, older_than=None) == ["lapsed"]
    assert _names(expired=False, older_than=0.5 * HOUR, tags=(("team", "b"),)) == ["young"]
    assert _names(expired=True, older_than=0.5 * HOUR, tags=(("team", "nobody"),)) == []
