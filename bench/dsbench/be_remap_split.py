"""Splits colocate's windows by whether BE moved before or during them.

    python3 bench/dsbench be-remap-split [--base static@96] LOG...

LOG is colocate's stdout (its "[rep N] CONFIG done: ..." lines, which carry
LS's p50 and each tenant's remap count over the vCtx's life). For every
window of a configuration whose name starts with "slo", LS's p50 minus the
base configuration's p50 at the same repetition and load (the same arrivals)
is put in one of two groups: BE remapped at least once (it expanded onto the
whole GPU and came back, in the window or in the settle before it), or not.
Prints, per file and configuration, each group's size, median difference
(us) and how many windows were slower than the base.

This is how docs/results/h200/ls_cost/README.md ("exp11-exp15") tells the cost of
BE's start-up expansion from the rest: the JSON keeps no per-window remap
counts.
"""
import argparse
import collections
import re
import statistics

LOAD = re.compile(r"\[rep (\d+)\] == load ([\d.]+)")
DONE = re.compile(r"\[rep (\d+)\] (\S+)\s+done: LS p50 ([\d.]+) us.*?(\d+) remaps; BE .*?(\d+) remaps")


def windows(path):
    """(rep, load, config, LS p50 us, BE remaps) for each co-located window."""
    out, load = [], None
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = LOAD.match(line)
            if m:
                load = m.group(2)
                continue
            m = DONE.match(line)
            if m and load is not None:
                out.append((m.group(1), load, m.group(2), float(m.group(3)), int(m.group(5))))
    return out


def split(rows, base):
    """{(config, remapped): [p50 - base p50, ...]} over the slo* windows."""
    ref = {(r, ld): p50 for r, ld, cfg, p50, _ in rows if cfg == base}
    groups = collections.defaultdict(list)
    for r, ld, cfg, p50, be_remaps in rows:
        if cfg.startswith("slo") and (r, ld) in ref:
            groups[(cfg, be_remaps > 0)].append(p50 - ref[(r, ld)])
    return groups


def main(argv=None):
    ap = argparse.ArgumentParser(prog="dsbench be-remap-split", description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="static@96", help="configuration to subtract (default static@96)")
    ap.add_argument("logs", nargs="+")
    a = ap.parse_args(argv)
    print(f"LS p50 minus {a.base}'s, us: median (slower / windows), by whether BE remapped")
    for path in a.logs:
        groups = split(windows(path), a.base)
        if not groups:
            print(f"{path}: no slo* windows paired with {a.base}")
            continue
        print(path)
        for (cfg, moved), d in sorted(groups.items()):
            slower = sum(x > 0 for x in d)
            label = "BE remapped" if moved else "BE stayed"
            print(f"  {cfg:14s} {label:12s} {statistics.median(d):+7.1f} ({slower:2d}/{len(d):2d})")
    return 0

