"""Summarises colocate's per-request traces (colocate --trace-dir DIR).

Each DIR/LOAD_REP_CONFIG.csv holds one configuration's LS requests, settle then
window, in arrival order (bench/colocate/run.h, colo_env.trace_path). Per
file and phase this prints the requests, how many were over the SLO, the runs
they came in (consecutive late requests), the share of requests per LS tier
(SMs) and the tier changes (request index, from and to SMs). Runs of lates are
what an error budget reacts to; the tier changes are what the policy did.
Configurations of one load and repetition share their arrivals, so a fixed
split's trace is what LS met on that tier at each of those requests.

    python3 bench/dsbench trace-summary DIR [--config NAME] [--changes]
    python3 bench/dsbench trace-summary DIR --pair [--config slo_aware]  # each tier's window requests
                                       # against the fixed split on that tier, request by request
    python3 bench/dsbench trace-summary DIR --check REQUESTS  # the smoke test: every file has
                                                              # REQUESTS window lines, well formed
"""
import argparse
import csv
import os
import statistics
import sys

FIELDS = ["phase", "index", "due_us", "latency_us", "over_slo", "pctx", "sms"]


def read(path):
    """The rows of one trace file, checked: (phase, index, due_us, latency_us, over_slo, sms)."""
    with open(path, newline="") as f:
        r = csv.reader(f)
        header = next(r, None)
        if header != FIELDS:
            raise ValueError(f"{path}: header {header}, expected {FIELDS}")
        rows = []
        for n, row in enumerate(r, 2):
            if len(row) != len(FIELDS) or row[0] not in ("settle", "window"):
                raise ValueError(f"{path}:{n}: malformed line {row}")
            rows.append((row[0], int(row[1]), float(row[2]), float(row[3]), int(row[4]), int(row[6])))
    return rows


def summary(rows):
    """Requests, lates, runs of lates, {sms: count} and [(index, from, to)] changes of one phase."""
    late = runs = 0
    prev_late = False
    share, changes, prev_sms = {}, [], None
    for _, index, _, _, over, sms in rows:
        late += over
        runs += bool(over) and not prev_late
        prev_late = bool(over)
        share[sms] = share.get(sms, 0) + 1
        if prev_sms is not None and sms != prev_sms:
            changes.append((index, prev_sms, sms))
        prev_sms = sms
    return len(rows), late, runs, share, changes


def pair(rows, split_rows):
    """Per tier, the window requests of `rows` on it against the same requests (by position: configurations of
    one load and repetition share their arrivals) of the fixed split on that tier: {sms: (n, median latency
    difference us, lates, the split's lates)}; split_rows maps SMs to a split's rows."""
    out = {}
    for sms, split in split_rows.items():
        at = [j for j, r in enumerate(rows) if r[0] == "window" and r[5] == sms and j < len(split)]
        if at:
            diff = [rows[j][3] - split[j][3] for j in at]
            out[sms] = (len(at), statistics.median(diff), sum(rows[j][4] for j in at), sum(split[j][4] for j in at))
    return out


def print_pairs(d, names):
    """--pair: each file's tiers against the fixed splits of its load and repetition."""
    bad = 0
    for name in names:
        load_rep = "_".join(name.split("_", 2)[:2])
        try:
            rows = read(os.path.join(d, name))
            splits = {}
            for f in os.listdir(d):
                if f.startswith(load_rep + "_static@") and f.endswith(".csv"):
                    splits[int(f[len(load_rep) + 8:-4])] = read(os.path.join(d, f))
        except ValueError as e:
            print(f"trace-summary: {e}", file=sys.stderr)
            bad += 1
            continue
        cells = [f"{sms}: {n} requests, median {dm:+.0f} us, {late} late against {split_late}"
                 for sms, (n, dm, late, split_late) in sorted(pair(rows, splits).items())]
        print(f"{name[:-4]:<28} " + (" | ".join(cells) if cells else "no fixed split on its tiers"))
    return 1 if bad else 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="dsbench trace-summary", description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="colocate --trace-dir DIR")
    ap.add_argument("--config", help="only files of this configuration (e.g. slo_aware)")
    ap.add_argument("--changes", action="store_true", help="list every tier change")
    ap.add_argument("--pair", action="store_true",
                    help="each tier's window requests against the fixed split on that tier (default --config "
                         "slo_aware)")
    ap.add_argument("--check", type=int, metavar="REQUESTS",
                    help="exit 1 unless every file is well formed with REQUESTS window requests")
    a = ap.parse_args(argv)
    if a.pair and not a.config:
        a.config = "slo_aware"
    names = sorted(f for f in os.listdir(a.dir) if f.endswith(".csv"))
    if a.config:
        names = [f for f in names if f[:-4].split("_", 2)[-1] == a.config]
    if not names:
        print(f"trace-summary: no trace files in {a.dir}", file=sys.stderr)
        return 1
    if a.pair:
        return print_pairs(a.dir, names)
    bad = 0
    for name in names:
        try:
            rows = read(os.path.join(a.dir, name))
        except ValueError as e:
            print(f"trace-summary: {e}", file=sys.stderr)
            bad += 1
            continue
        for phase in ("settle", "window"):
            ph = [r for r in rows if r[0] == phase]
            if a.check is not None and phase == "window" and len(ph) != a.check:
                print(f"trace-summary: {name}: {len(ph)} window requests, expected {a.check}", file=sys.stderr)
                bad += 1
            if not ph:
                continue
            n, late, runs, share, changes = summary(ph)
            tiers = " ".join(f"{sms}:{100.0 * c / n:.1f}%" for sms, c in sorted(share.items()))
            run_mean = f"{late / runs:.2f}" if runs else "-"
            print(f"{name[:-4]:<28} {phase:<6} {n:6d} requests, {late:4d} late in {runs:4d} runs "
                  f"(mean {run_mean}); SMs {tiers}; {len(changes)} changes")
            if a.changes:
                for index, was, now in changes:
                    print(f"    request {index}: {was} -> {now} SMs")
    return 1 if bad else 0

