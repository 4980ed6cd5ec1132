"""Merges W1 load sweeps run in separate calls into one sweep file.

usage: python3 bench/dsbench merge-sweep --out FILE SWEEP.json SWEEP.json...

A full W1 sweep (colocate --sweep 0.05,...,0.5, 3 repetitions of 3000
requests per load) runs longer than one device call may, mostly at the low
loads (at 5% load 3000 requests take 15 s per configuration). Run it in
parts on one machine with one fixed SLO, e.g.

  colocate --device cuda --sweep 0.05 --ls-slo-us 974 --out part1.json
  colocate --device cuda --sweep 0.1,0.2 --ls-slo-us 974 --out part2.json

and merge them: each load keeps its own part's points, medians, ranges and
verdict (every ratio there is taken within its part, against that part's
LS-alone and BE-alone runs), and the merged file says which part each load
came from (`merged_from`, with each part's commit). The parts must agree on
the device, driver, commit, SLO, target, configurations, repetitions and
requests per load, and no load may come twice; otherwise the merge is
refused (exit 1, the difference named).

Updating a merged sweep with newer runs of some loads:

  merge-sweep --replace --across-commits --out new.json old.json part3.json

--replace: a load in a later part replaces the same load of an earlier one
(a part that is itself a merged sweep keeps its own `merged_from` for the
loads it still gives). --across-commits: the parts may come from different
commits; the merged file's `commit` then lists them all, in the parts'
order, so no reader takes one commit for the whole table. Standard library only.
"""
import argparse
import json
import os
import sys

# what every part must share for its loads to sit in one table
SAME = ("benchmark", "device", "driver", "sms", "commit", "ls_slo_us", "target", "ls_sms_requested",
        "requests_per_load", "reps", "ls_tiers")
# per-load tables, keyed by the load ("0.05")
PER_LOAD = ("points", "sweep", "verdict")


def configs(d):
    """The configurations a sweep ran (those of its first load)."""
    first = next(iter(d.get("sweep", {}).values()), {})
    return sorted(first)


def sources(name, d):
    """What a part contributes to merged_from: its own record, or the
    records of the merged sweep it is (each with the commit it ran at)."""
    if d.get("merged_from"):
        return [dict(m, commit=m.get("commit", d.get("commit"))) for m in d["merged_from"]]
    # the part's file name, not where it lay on the machine that merged it
    return [{"file": os.path.basename(name), "loads": list(d.get("sweep", {})), "command": d.get("command"),
             "date": d.get("date"), "commit": d.get("commit"), "ls_service_us": d.get("ls_service_us"),
             "be_alone_steps_per_s": d.get("be_alone_steps_per_s")}]


def merge(parts, replace=False, across_commits=False):
    """parts: [(name, sweep dict)] -> the merged dict; ValueError names what
    differs. replace: a later part's load replaces an earlier one's;
    across_commits: the parts' commits may differ."""
    if not parts:
        raise ValueError("no sweep to merge")
    base_name, base = parts[0]
    for name, d in parts:
        if d.get("benchmark") != "colocate_sweep":
            raise ValueError("%s is not a colocate sweep (benchmark %r)" % (name, d.get("benchmark")))
        for key in SAME:
            if key == "commit" and across_commits:
                continue
            if d.get(key) != base.get(key):
                raise ValueError("%s and %s differ in %s: %r against %r" % (name, base_name, key, d.get(key),
                                                                          base.get(key)))
        if configs(d) != configs(base):
            raise ValueError("%s and %s ran different configurations: %s against %s" % (
                name, base_name, ",".join(configs(d)), ",".join(configs(base))))
    out = {k: v for k, v in base.items() if k not in PER_LOAD}
    for key in PER_LOAD:
        out[key] = {}
    seen = {}
    for i, (name, d) in enumerate(parts):
        for load in d.get("sweep", {}):
            if load in seen and not replace:
                raise ValueError("load %s is in both %s and %s" % (load, parts[seen[load]][0], name))
            seen[load] = i
    merged_from = []
    for i, (name, d) in enumerate(parts):
        kept = {load for load, j in seen.items() if j == i}
        for m in sources(name, d):
            loads = [load for load in m["loads"] if load in kept]
            if loads:
                merged_from.append(dict(m, loads=loads))
    out["merged_from"] = merged_from
    for load in sorted(seen, key=float):
        d = parts[seen[load]][1]
        for key in PER_LOAD:
            if load in d.get(key, {}):
                out[key][load] = d[key][load]
    out["command"] = " ; ".join(str(p["command"]) for p in merged_from)
    out["date"] = max(str(p["date"]) for p in merged_from)
    commits = list(dict.fromkeys(m["commit"] for m in merged_from))  # in the parts' order, once each
    out["commit"] = commits[0] if len(commits) == 1 else ", ".join(str(c) for c in commits)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="dsbench merge-sweep", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the merged sweep JSON")
    ap.add_argument("--replace", action="store_true", help="a later part's load replaces an earlier part's")
    ap.add_argument("--across-commits", action="store_true", help="parts may come from different commits")
    ap.add_argument("parts", nargs="+", help="sweep JSON files (colocate --sweep), one fixed --ls-slo-us")
    a = ap.parse_args(argv)
    parts = []
    for path in a.parts:
        try:
            with open(path) as f:
                parts.append((path, json.load(f)))
        except (OSError, ValueError) as e:
            print("merge-sweep: %s: %s" % (path, e), file=sys.stderr)
            return 1
    try:
        merged = merge(parts, replace=a.replace, across_commits=a.across_commits)
    except ValueError as e:
        print("merge-sweep: %s" % e, file=sys.stderr)
        return 1
    with open(a.out, "w") as f:
        json.dump(merged, f, indent=1)
        f.write("\n")
    print("merge-sweep: %s: loads %s from %d files" % (a.out, ", ".join(merged["sweep"]), len(parts)))
    return 0
