"""Print the reliability campaign's table; exit 1 unless orphans, duplicates and foreign
resources touched are all 0. Usage: python -m tests.reliability.report REPORT.json"""

from __future__ import annotations

import json
import sys

from tests.reliability.campaign import MUST_BE_ZERO


def main(path: str) -> int:
    with open(path, encoding="utf-8") as fh:
        data: dict[str, int] = json.load(fh)
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
