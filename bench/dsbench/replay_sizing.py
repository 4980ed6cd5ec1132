"""Replays slo_aware's right-sizing offline on the fixed splits' per-request traces.

A colocate sweep with --trace-dir records, for one load and repetition, every
LS request (settle, then window) of each static@N configuration on the same
arrivals. Request j on tier N then "costs" what static@N's request j met: its
latency, late or not. This tool runs slo_aware's sizing rule itself
(src/policy/sizing.c through libdssizing, dsbench.sizing; docs/design.md,
section 4.9) over those requests, choosing at each request the tier the rule
would be on, and reports for the window what it would have reached: the share per tier, the attainment
(from the chosen tiers' requests) and BE's throughput (each tier's static@N
be_tput_norm of that repetition, weighted by the share of the window spent on
it), beside what slo_aware measured in the same run, and the verdict colocate
gives (dsbench.verdict: the one implementation, bench/common/verdict.c through
libdsverdict) of the replay and of the measured slo_aware against the sweep's
baselines. The rule's constants are parameters (--probe-fail-sd, ...: fields
of ds_sizing_config, the policy's own values unless given), so a change can
be judged on GPU traces before it is run on the GPU; a new rule is written in
sizing.c, where the policy and this tool both get it.

What the replay leaves out: a move's cost (BE leaving the SMs LS gains, LS's
first request on a new tier), the coupling between requests on different
tiers (a request's queue wait depends on the previous one's tier), BE's
expansion (W1's BE units never fit LS's slack), and ticks (rules are applied
after each request, not every 250 us). It is a model for comparing rules on
the same requests, not a prediction of the GPU's figures.

    python3 bench/dsbench replay-sizing SWEEP.json TRACE_DIR [--load 0.30] [--verbose]

TRACE_DIR may also be a tar archive of one.
"""
import argparse
import bisect
import collections
import json
import math
import os
import statistics
import sys
import tarfile
import tempfile

# trace_summary: the trace CSV's reader, which checks its header and lines
from . import trace_summary
# the verdict colocate and serve give, from the same C code
from . import verdict as shared_verdict
# slo_aware's sizing rule, the policy's own C code (libdssizing)
from . import sizing

def load_trace(path):
    """[(latency_us, over_slo, sms)] in arrival order, settle then window, and the settle count."""
    rows = trace_summary.read(path)
    return [(lat, over, sms) for _, _, _, lat, over, sms in rows], sum(r[0] == "settle" for r in rows)


def p99(window):
    s = sorted(window)
    k = math.ceil(0.99 * len(s))
    return s[k - 1 if k else 0]


# the rule's constants a replay may vary (--probe-fail-sd ...): ds_sizing_config's fields
RULE_FIELDS = ("probe_fail_sd", "probe_hold_sd", "probe_hold", "probe_max", "cap_sd", "dispersion_prior",
               "dispersion_max", "held_long", "forget_within_sd", "overload_stay")


def rule(ladder, start_sms, p):
    """slo_aware's sizing rule (dsbench.sizing: src/policy/sizing.c) on `ladder` with the replay's parameters.
    Time is counted in requests: --dwell-us becomes p.dwell_requests."""
    fields = {k: getattr(p, k, None) for k in RULE_FIELDS}
    if not getattr(p, "dispersion", True):
        fields["dispersion_max"] = 1.0
    fields = {k: v for k, v in fields.items() if v is not None}
    return sizing.Sizing(ladder, ladder.index(start_sms) if start_sms in ladder else 0, target=p.target,
                         shrink_requests=p.shrink_requests, dwell_us=float(p.dwell_requests), descent=p.descent,
                         **fields)


def replay(static, settle, ladder, start_sms, slo_us, p):
    """The tier index chosen for every request (settle and window) and the chosen requests' lates: request j
    is served on the tier the rule is on, then the rule steps on the counts so far (a step per request, where
    slo_aware steps every 250 us), with the p99 of the last DS_REQUEST_WINDOW chosen latencies."""
    z = rule(ladder, start_sms, p)
    z.step(0, 0, 0, 0.0, 0.0)  # sizing starts before the first request
    total = len(next(iter(static.values())))
    size = sizing.default_config().request_window
    tiers, lates = [], []
    window, ordered = collections.deque(), []
    req = over = runs = prev = 0
    for j in range(total):
        lvl = z.level
        lat, late, _ = static[ladder[lvl]][j]
        tiers.append(lvl)
        lates.append(late)
        req += 1
        over += late
        runs += late and not prev
        prev = late
        window.append(lat)
        bisect.insort(ordered, lat)
        if len(window) > size:
            del ordered[bisect.bisect_left(ordered, window.popleft())]
        k = math.ceil(0.99 * len(ordered))
        z.step(req, over, runs, float(req), ordered[k - 1 if k else 0] / slo_us)
    return tiers, lates


def self_test(p):
    """The rule on synthetic traces, as tests/test_slo_aware.c drives the policy: 0 if it behaves."""
    ladder, slo = [16, 32, 48, 64, 80, 96], 100.0
    p.dwell_requests = 0
    descent = p.descent != "none"

    def traces(n, slow_every=0, blocks=128):
        # `blocks` blocks of 20 us, one wave per SM at a time (128: 40 us on 64 SMs or more, 60 on 48, 80 on
        # 32, 160 on 16; 32: 40 us on 32 SMs or more, 80 on 16); every slow_every-th request takes 150 us
        out = {}
        for sms in ladder:
            lats = [150.0 if slow_every and j % slow_every == slow_every - 1 else 20.0 * math.ceil(blocks / sms)
                    for j in range(n)]
            out[sms] = [(x, int(x > slo), sms) for x in lats]
        return out

    ok = True
    # (what, traces, the tier expected last, its changes, most late requests): with the descent, 64's p99 leaves
    # headroom for 16, whose probe fails on the compute-bound traces (every request late) and holds on the others
    cases = [("compute-bound", traces(2000), 32, 2, 8 if descent else 0),
             ("0.8% late everywhere", traces(2500, 125), 32, 2, 20 + (8 if descent else 0)),
             ("memory-bound", traces(2000, 0, 32), 16, 1 if descent else 3, 0)]
    for what, tr, sms, want_changes, most_late in cases:
        tiers, lates = replay(tr, 0, ladder, 64, slo, p)
        changes = sum(1 for a, b in zip(tiers, tiers[1:]) if a != b)
        if ladder[tiers[-1]] != sms or changes != want_changes or sum(lates) > most_late:
            print(f"replay self-test, {what}: {sms} SMs, {want_changes} changes and at most {most_late} late "
                  f"expected, got {ladder[tiers[-1]]} ({changes} changes, {sum(lates)} late)", file=sys.stderr)
            ok = False
    print("replay self-test:", "ok" if ok else "FAILED")
    return 0 if ok else 1


def held_long(text):
    """--held-long's value: a number of shrink_requests, 'never' for 0."""
    return 0.0 if text == "never" else float(text)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="dsbench replay-sizing", description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep", nargs="?", help="the colocate --sweep JSON (SLO, target, BE per tier per repetition)")
    ap.add_argument("traces", nargs="?", help="its --trace-dir, or a tar archive of it")
    ap.add_argument("--self-test", action="store_true", help="check the rule on synthetic traces and exit")
    ap.add_argument("--load", help="one load only (e.g. 0.30)")
    ap.add_argument("--start", type=int, default=64, help="first tier, SMs (slo_aware's ls_sms; default 64)")
    ap.add_argument("--target", type=float,
                    help="the rules' attainment target (default: the sweep's, which the verdict uses)")
    ap.add_argument("--shrink-requests", type=int, default=128)
    ap.add_argument("--dwell-us", type=float, default=20000.0,
                    help="least time on a tier before a step down, as requests at the load's rate (default 20000)")
    # the rule's constants (ds_sizing_config's fields): unset, the policy's own (ds_sizing_config_default)
    ap.add_argument("--probe-fail-sd", type=float, help="SDs over the allowance at which a probe fails")
    ap.add_argument("--probe-hold-sd", type=float, help="SDs over the allowance within which a probe holds")
    ap.add_argument("--probe-hold", type=int, help="x shrink_requests before a probe holds")
    ap.add_argument("--probe-max", type=int, help="x shrink_requests before an unheld probe fails")
    ap.add_argument("--no-dispersion", dest="dispersion", action="store_false",
                    help="a budget of 512 requests' worth however lates bunch up (dispersion_max 1)")
    ap.add_argument("--dispersion-prior", type=float, help="singleton runs of lates assumed at the start")
    ap.add_argument("--dispersion-max", type=float, help="the late count's dispersion at most")
    ap.add_argument("--cap-sd", type=float, help="SDs of an overload's clear excess")
    ap.add_argument("--held-long", type=held_long,
                    help="x shrink_requests after which a step down has held for long: its failures are forgotten "
                         "and growth from it does not back off (0 or 'never': it never is)")
    ap.add_argument("--forget-within-sd", type=float,
                    help="a step down held for long forgets its failures only while its lates are within the "
                         "target's allowance plus this many SDs (negative: however many)")
    ap.add_argument("--overload-stay", type=int,
                    help="x shrink_requests on the largest tier before an overload checks the tier below")
    ap.add_argument("--descent", choices=("first", "none", "always"), default="first",
                    help="steps down past several tiers at once, to the smallest the headroom allows: until LS "
                         "first steps up (default, as slo_aware), never (one tier per step down, as slo_aware up "
                         "to e11eaab), or always")
    ap.add_argument("--shifts", type=int, default=1,
                    help="also replay each repetition from K-1 other starts in its requests (rotated), and count "
                         "the verdicts that hold: how robust a rule is to where its lates fall")
    ap.add_argument("--concat", action="store_true",
                    help="replay the repetitions back to back as one run (with --shifts starts), the fixed splits "
                         "judged on the same requests")
    ap.add_argument("--verbose", action="store_true", help="every repetition")
    p = ap.parse_args(argv)
    try:
        return run(ap, p)
    except sizing.SizingLibraryError as e:  # the rule is libdssizing's: say where it was looked for
        print(f"dsbench replay-sizing: {e}", file=sys.stderr)
        return 2


def run(ap, p):
    """main's work once the arguments are parsed."""
    if p.self_test:
        p.target = p.target or 0.99
        p.dispersion = True
        return self_test(p)
    if not p.sweep or not p.traces:
        ap.error("SWEEP.json and TRACE_DIR are needed (or --self-test)")
    if os.path.isfile(p.traces):
        with tempfile.TemporaryDirectory() as tmp, tarfile.open(p.traces) as tar:
            names = [m for m in tar.getmembers() if m.isfile() and m.name.endswith(".csv") and
                     os.path.basename(m.name) == m.name.removeprefix("./")]  # flat CSVs only, no paths
            tar.extractall(tmp, members=names)
            p.traces = tmp
            return replay_sweep(p)
    return replay_sweep(p)


def replay_concat(p, d, load, cfgs, slo, ladder):
    """--concat: the repetitions' requests back to back as one long run (window: all but the first settle),
    replayed from --shifts starts; the fixed splits judged on the same requests. How the verdict's robustness
    grows with the run's length."""
    static, settle, be = {sms: [] for sms in ladder}, None, {}
    for rep in range(d.get("reps", 1)):
        for sms in ladder:
            tr, st = load_trace(os.path.join(p.traces, f"{float(load):.2f}_{rep + 1}_static@{sms}.csv"))
            static[sms] += tr
            settle = st if settle is None else settle
            be.setdefault(sms, []).append(cfgs[f"static@{sms}"]["be_tput_norm_reps"][rep])
    be = {sms: sum(v) / len(v) for sms, v in be.items()}
    target = d.get("target", 0.99)
    oks, atts, smss, bs = 0, [], [], "none"
    for k in range(p.shifts):
        rot = rotated(static, k, p.shifts)
        # the splits on the rotated window, one run each: the verdict compares on the same requests
        bases = {}
        for sms in ladder:
            win = rot[sms][settle:]
            late = sum(r[1] for r in win)
            bases[f"static@{sms}"] = {"baseline": True, "lat": p99([r[0] for r in win]), "be": be[sms],
                                      "within": len(win) - late, "total": len(win)}
        r = replay_figures(rot, settle, ladder, slo, be, p)
        r_sms, r_att = r[:2]
        line = verdict(bases, judged_config([r]), target)
        if k == 0:
            bs = line
        oks += line.startswith("ok")
        atts.append(r_att)
        smss.append(r_sms)
    print(f"{load}  concat   {len(static[ladder[0]]) - settle} requests; verdict ok in {oks} of {p.shifts}; "
          f"attainment {100 * min(atts):.2f}-{100 * max(atts):.2f}%, SMs mean {sum(smss) / len(smss):.1f}; "
          f"from the first start: {bs}")


def rotated(static, k, shifts):
    """Every tier's requests from start k of `shifts` (k * length / shifts), wrapped: the same arrivals for all."""
    off = k * len(next(iter(static.values()))) // shifts
    return {sms: tr[off:] + tr[:off] for sms, tr in static.items()}


def medians(rows):
    """Column medians (the upper one for an even count) of equal-length tuples."""
    return [sorted(x[i] for x in rows)[len(rows) // 2] for i in range(len(rows[0]))]


def replay_sweep(p):
    """Replays every load and repetition of p.sweep on the traces in p.traces; prints them."""
    d = json.load(open(p.sweep))
    judged_target = d.get("target", 0.99)  # the verdict's; the rules' may differ (--target)
    p.target = p.target or judged_target
    slo = d["ls_slo_us"]
    ladder = d["ls_tiers"]
    print(f"{p.sweep}: commit {d.get('commit')}, SLO {slo} us, target {p.target}, ladder {ladder}, start {p.start}")
    if not p.concat:
        print("load  rep  replay: SMs mean / att % / BE   measured slo_aware: SMs / att % / BE   best split meeting")
    for load, cfgs in d["sweep"].items():
        if p.load and float(load) != float(p.load):
            continue
        rate = d.get("points", {}).get(load, {}).get("ls_rate_per_s", 0.0)
        p.dwell_requests = math.ceil(rate * p.dwell_us / 1e6)
        if p.concat:
            replay_concat(p, d, load, cfgs, slo, ladder)
            continue
        sums = {"r": [], "m": []}
        shifted = {}
        for rep in range(d.get("reps", 1)):
            def path(c):
                return os.path.join(p.traces, f"{float(load):.2f}_{rep + 1}_{c}.csv")
            static, settle = {}, 0
            for sms in ladder:
                if os.path.exists(path(f"static@{sms}")):
                    static[sms], settle = load_trace(path(f"static@{sms}"))
            if len(static) != len(ladder):
                print(f"{load}  {rep + 1}: traces of every static@N needed ({len(static)} of {len(ladder)})")
                continue
            be = {sms: cfgs[f"static@{sms}"]["be_tput_norm_reps"][rep] for sms in ladder}
            # the replay's LS p99 over ls_alone's of the repetition, as colocate's ls_p99_norm
            alone = (cfgs.get("ls_alone", {}).get("ls_p99_us_reps") or [])[rep:rep + 1] or [math.nan]

            def normed(r):
                return r[:5] + (r[5] / alone[0] if alone[0] else math.nan,)
            for k in range(1, p.shifts):  # the same requests from another start, for the rules' spread
                shifted.setdefault(k, []).append(normed(replay_figures(rotated(static, k, p.shifts), settle, ladder,
                                                                       slo, be, p)))
            r = normed(replay_figures(static, settle, ladder, slo, be, p))
            r_sms, r_att, r_be = r[:3]
            m = measured_figures(d, cfgs.get("slo_aware", {}), rep,
                                 path("slo_aware") if os.path.exists(path("slo_aware")) else None)
            m_sms, m_att, m_be = m[:3]
            meeting = [(be[s], s) for s in ladder
                       if cfgs[f"static@{s}"]["ls_attainment_reps"][rep] >= p.target]
            best = max(meeting) if meeting else None
            sums["r"].append(r)
            sums["m"].append(m)
            if p.verbose:
                bs = f"static@{best[1]} BE {best[0]:.3f}" if best else "none"
                print(f"{load}  {rep + 1}    {r_sms:6.1f} / {100 * r_att:6.2f} / {r_be:.3f}            "
                      f"{m_sms:6.1f} / {100 * m_att:6.2f} / {m_be:.3f}     {bs}")
        bases = sweep_baselines(d, load, cfgs)
        for key, label in (("r", "replay"), ("m", "measured")):
            if sums[key]:
                med = medians(sums[key])
                print(f"{load}  median {label:<8} SMs {med[0]:6.1f}, attainment {100 * med[1]:6.2f}%, BE {med[2]:.3f}"
                      f"  {verdict(bases, judged_config(sums[key]), judged_target)}")
        if shifted and sums["r"]:
            shifted[0] = sums["r"]
            meds = [medians(reps) for reps in shifted.values()]
            oks = [verdict(bases, judged_config(reps), judged_target).startswith("ok") for reps in shifted.values()]
            atts = sorted(m[1] for m in meds)
            print(f"{load}  shifts   verdict ok in {sum(oks)} of {len(oks)}; median attainment from "
                  f"{100 * atts[0]:.2f}% to {100 * atts[-1]:.2f}%, SMs mean {sum(m[0] for m in meds) / len(meds):.1f}")
    return 0


def replay_figures(static, settle, ladder, slo, be, p):
    """Replays one repetition's traces: the window's mean SMs, attainment and BE throughput, then for the
    verdict its requests within the SLO, its requests and its latency p99 (us)."""
    tiers, lates = replay(static, settle, ladder, p.start, slo, p)
    win = range(settle, len(tiers))
    n = len(win)
    late = sum(lates[j] for j in win)
    return (sum(ladder[tiers[j]] for j in win) / n, 1.0 - late / n, sum(be[ladder[tiers[j]]] for j in win) / n,
            n - late, n, p99([static[ladder[tiers[j]]][j][0] for j in win]))


def measured_figures(d, m, rep, trace):
    """What slo_aware measured in repetition rep, shaped as replay_figures with ls_p99_norm for the p99: SMs
    and counts from its trace where there is one, else from the sweep's figures (the counts then from
    ls_attainment times requests_per_load, rounded)."""
    def at(key):
        v = m.get(key + "_reps") or []
        return v[rep] if rep < len(v) and v[rep] is not None else math.nan
    att, be, tail = at("ls_attainment"), at("be_tput_norm"), at("ls_p99_norm")
    if trace:
        rows, settle = load_trace(trace)
        win = rows[settle:]
        n = len(win)
        late = sum(r[1] for r in win)
        return (sum(r[2] for r in win) / max(1, n), att, be, n - late, n, tail)
    n = d.get("requests_per_load") or 0
    within = round(att * n) if n and not math.isnan(att) else math.nan
    return (math.nan, att, be, within, n if n else math.nan, tail)


def ranged(v):
    """(median, min, max) of the finite values of v, the median interpolated as colocate's; None without any."""
    v = [x for x in v if x is not None and not math.isnan(x)]
    return (statistics.median(v), min(v), max(v)) if v else None


def judged_config(reps):
    """The judged configuration for the shared verdict from its repetitions (replay_figures' tuples): LS p99
    and BE over the repetitions, the attainment's counts summed."""
    return {"lat": ranged([r[5] for r in reps]), "be": ranged([r[2] for r in reps]),
            "within": sum(r[3] for r in reps), "total": sum(r[4] for r in reps)}


def sweep_baselines(d, load, cfgs):
    """The sweep's baselines at one load, as colocate judges them: every co-located configuration but
    slo_aware*, its ls_p99_norm and be_tput_norm (median, min, max) and its attainment's counts over the
    repetitions: the verdict's own (attainment_counts, written since the verdict reads counts), else each
    repetition's ls_attainment times requests_per_load, rounded (older files hold no counts)."""
    counts = ((d.get("verdict") or {}).get(load) or {}).get("attainment_counts") or {}
    n = d.get("requests_per_load") or 0
    out = {}
    for c, v in cfgs.items():
        if c in ("ls_alone", "be_alone") or c.startswith("slo_aware") or v.get("be_tput_norm") is None:
            continue
        if c in counts:
            within, total = counts[c]
        else:
            reps = [a for a in v.get("ls_attainment_reps") or [] if a is not None]
            if not n or not reps:
                continue
            within, total = sum(round(a * n) for a in reps), n * len(reps)
        out[c] = {"baseline": True, "within": within, "total": total,
                  "lat": span(v, "ls_p99_norm"), "be": span(v, "be_tput_norm")}
    return out


def span(v, key):
    """(median, min, max) of a sweep figure (the median alone where the file has no range); None without it."""
    med = v.get(key)
    if med is None:
        return None
    return med, v.get(key + "_min", med), v.get(key + "_max", med)


def verdict(baselines, judged, target):
    """The shared verdict (dsbench.verdict: bench/common/verdict.c, colocate's rule) of `judged` (a
    judged_config) against baselines (sweep_baselines), as one line that starts with "ok" or "NOT ok"."""
    if judged["total"] != judged["total"] or not judged["total"]:  # NaN or 0: no counts to judge
        return "no verdict (no request counts)"
    v = shared_verdict.judge({**baselines, "judged": judged}, "judged", target, key="judged")
    lo, hi = v["attainment_interval"]["judged"]
    why = [f"attainment [{lo:.4f}, {hi:.4f}] {'meets' if v['judged_meets'] else 'misses'}"]
    if v["best_baseline"]:
        why.append(f"BE {v['judged_be_minus_best']:+.3f} vs {v['best_baseline']} "
                   f"(clearly meeting: {', '.join(v['baselines_clearly_meeting'])})")
    else:
        why.append("no baseline clearly meets")
    if v["judged_dominated_by"]:
        why.append("dominated by " + ", ".join(v["judged_dominated_by"]))
    return f"{'ok' if v['ok'] else 'NOT ok'} ({'; '.join(why)})"
