#!/usr/bin/env python3
"""The unit test divide_sm_agree (bench/serve/meson.build): SGLang's
divide_sm is written twice, in C for the serve benchmark's pdmux_static
(pdmux.c, pdmux_divide_sm) and in Python for the binding's PDMux
(detshare.serving.divide_sm). This runs the C one through divide_sm_table
(built beside serve) over a grid of inputs and fails where the two differ, so
neither can change without the other.

    python3 bench/serve/check_divide_sm.py BUILD/bench/serve/divide_sm_table

The grid: every GPU size from 1 to 1024 SMs (the C function keeps at most 64
candidate splits, which holds to about 1050 SMs) by 0 to 12 parts (the
benchmark asks for 6; more parts than splits, and none, included).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bindings" / "python"))
from detshare.serving import divide_sm  # noqa: E402  (pure Python: loads no library)

TOTALS = range(1, 1025)
PARTS = range(0, 13)


def c_answers(program: str, grid: List[Tuple[int, int]]) -> Dict[Tuple[int, int], List[int]]:
    """{(total, parts): prefill SM counts} as divide_sm_table prints them."""
    stdin = "".join(f"{t} {p}\n" for t, p in grid)
    r = subprocess.run([program], input=stdin, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise SystemExit(f"{program} exited {r.returncode}: {r.stderr.strip()}")
    out: Dict[Tuple[int, int], List[int]] = {}
    for line in r.stdout.splitlines():
        head, _, tail = line.partition(":")
        t, p = (int(x) for x in head.split())
        out[(t, p)] = [int(x) for x in tail.split()]
    return out


def main(argv: List[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    grid = [(t, p) for t in TOTALS for p in PARTS]
    c = c_answers(argv[1], grid)
    if sorted(c) != grid:
        print(f"divide_sm_table answered {len(c)} inputs, not the {len(grid)} asked")
        return 1
    py = {(t, p): divide_sm(t, p) for t, p in grid}
    bad = [(t, p, c[(t, p)], py[(t, p)]) for t, p in grid if c[(t, p)] != py[(t, p)]]
    for t, p, cv, pv in bad[:20]:
        print(f"divide_sm({t}, {p}): C pdmux_divide_sm {cv}, Python detshare.serving.divide_sm {pv}")
    splits = sum(1 for v in c.values() if v)
    print(f"{len(grid)} inputs ({TOTALS.start}-{TOTALS.stop - 1} SMs x {PARTS.start}-{PARTS.stop - 1} parts, "
          f"{splits} with a split): {len(bad)} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
