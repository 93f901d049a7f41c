"""Print the reliability campaign's table; exit 1 unless orphans, duplicates and foreign
resources touched are all 0. Usage: python -m tests.reliability.report REPORT.json

The tests write one part per test worker (REPORT.json.gw0, ...; REPORT.json.main without
workers): the table adds them up. The Makefile removes old parts before a run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.reliability.campaign import MUST_BE_ZERO


def main(path: str) -> int:
    parts = sorted(Path(path).parent.glob(f"{Path(path).name}.*"))
    if not parts:
        print(f"no reliability report parts at {path}.*: did the reliability tests run?")
        return 1
    data: dict[str, int] = {}
    for part in parts:
        for key, value in json.loads(part.read_text(encoding="utf-8")).items():
            data[key] = data.get(key, 0) + value
    width = max(map(len, data))
    print(f"{'reliability campaign':<{width}}  count")
    for key, value in data.items():
        mark = "  (must be 0)" if key in MUST_BE_ZERO else ""
        print(f"{key:<{width}}  {value:>5}{mark}")
    bad = [key for key in MUST_BE_ZERO if data.get(key, 0)]
    if bad:
        print(f"FAILED: {', '.join(bad)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
