"""Replays slo_aware's right-sizing offline on the fixed splits' per-request traces.

A colocate sweep with --trace-dir records, for one load and repetition, every
LS request (settle, then window) of each static@N configuration on the same
arrivals. Request j on tier N then "costs" what static@N's request j met: its
latency, late or not. This tool runs a port of slo_aware's sizing rules
(src/policy/slo_aware.c, size_ls; docs/design.md, section 4.8) over those
requests, choosing at each request the tier the rules would be on, and reports
for the window what it would have reached: the share per tier, the attainment
(from the chosen tiers' requests) and BE's throughput (each tier's static@N
be_tput_norm of that repetition, weighted by the share of the window spent on
it), beside what slo_aware measured in the same run, and the verdict colocate
gives (dsbench.verdict: the one implementation, bench/common/verdict.c through
libdsverdict) of the replay and of the measured slo_aware against the sweep's
baselines. Rule variants are parameters (--probe-fail-sd, ...), so a
change can be judged on GPU traces before it is run on the GPU.

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

GRACE_UP, GRACE_DOWN = 4, 1
DS_REQUEST_WINDOW = 256
BUDGET_REQUESTS = 512.0
BACKOFF_SHIFT, MAX_BACKOFF_SHIFT = 3, 8
CAP_STAY, CAP_DEEPER = 2, 8


def load_trace(path):
    """[(latency_us, over_slo, sms)] in arrival order, settle then window, and the settle count."""
    rows = trace_summary.read(path)
    return [(lat, over, sms) for _, _, _, lat, over, sms in rows], sum(r[0] == "settle" for r in rows)


def cap_allowed(share, n, sd, phi=1.0):
    """Lates out of n that count as no more than `share`: its count plus sd standard deviations (Poisson,
    times the dispersion phi; at least 1)."""
    m = share * n
    return m + sd * math.sqrt(phi * (m if m > 1 else 1))


def p99(window):
    s = sorted(window)
    k = math.ceil(0.99 * len(s))
    return s[k - 1 if k else 0]


class Sizing:
    """slo_aware's sizing state (the target and the overload rules), one decision per request."""

    def __init__(self, ladder, start_sms, slo_us, p):
        self.ladder, self.slo, self.p = ladder, slo_us, p
        self.target = p.target
        self.share = 1.0 - p.target
        self.top_budget = self.share * BUDGET_REQUESTS
        self.lvl = ladder.index(start_sms) if start_sms in ladder else 0
        self.budget = self.top_budget
        self.fails = [0] * len(ladder)
        self.retry = [0] * len(ladder)
        self.cap, self.cap_probe, self.warned_top, self.ref_share = -1, False, False, 0.0
        self.cap_failed = [False] * len(ladder)
        self.req = self.over = 0
        self.grown = False
        self.prev_late, self.run_lates, self.runs = 0, 0, 0
        self.phi = 1.0  # the late count's dispersion (variance over mean), as slo_aware's late_dispersion
        self.window = []
        self.rec_n = [0.0] * len(ladder)  # each tier's judged requests and lates, decayed (--tier-memory)
        self.rec_late = [0.0] * len(ladder)
        self.enter(self.lvl, "start")

    def allowed(self, share, n, sd):
        """cap_allowed, the SD scaled by the dispersion under --dispersion-sd (Poisson in slo_aware)."""
        return cap_allowed(share, n, sd, self.phi if self.p.dispersion_sd else 1.0)

    def clearly_over(self, share, n, late, sd):
        """`late` of n is sd standard deviations and one request over `share`'s count."""
        return late > self.allowed(share, n, sd) + 1.0

    def enter(self, lvl, kind):
        self.lvl = lvl
        self.base_req, self.base_over = self.req, self.over
        self.grace = GRACE_DOWN if kind == "down" else GRACE_UP
        self.by_shrink = kind == "down"
        self.probing = kind == "down"
        self.entered_req = self.req

    def judge_from(self):
        self.base_req, self.base_over = self.req, self.over

    def step_up(self, overload):
        p = self.p
        self.grown = True
        if overload:
            self.cap_failed[self.lvl] = True
        elif p.backoff_after_hold or self.by_shrink:
            self.fails[self.lvl] += 1
            shift = min(self.fails[self.lvl] + BACKOFF_SHIFT, MAX_BACKOFF_SHIFT)
            self.retry[self.lvl] = self.req + (p.shrink_requests << shift)
        if not overload and p.full_budget_up:
            self.budget = self.top_budget
        elif not overload and self.probing and p.refund_probe:
            self.budget = self.top_budget
        elif self.budget < self.top_budget / 2:
            self.budget = self.top_budget / 2
        self.enter(self.lvl + 1, "up")

    def overload(self, n, late, at_top):
        p, need = self.p, self.p.shrink_requests
        if at_top:
            self.warned_top = True
        if not at_top and n >= CAP_STAY * need and self.clearly_over(self.ref_share, n, late, p.cap_sd):
            self.cap = -1
            self.step_up(True)
            return
        stay = (CAP_STAY if at_top else CAP_DEEPER) * need
        if self.lvl <= 0 or n < stay or not self.clearly_over(self.share, n, late, p.cap_sd) or \
                self.cap_failed[self.lvl - 1]:
            return
        if at_top or late / n < self.ref_share:
            self.ref_share = late / n
        self.enter(self.lvl - 1, "down")
        self.cap_probe = True

    def overload_probe(self, n, late):
        need = self.p.shrink_requests
        if self.clearly_over(self.ref_share, n, late, self.p.cap_sd) or \
                (self.p.cap_hold_sd is not None and n >= CAP_STAY * need and
                 late > self.allowed(self.ref_share, n, self.p.cap_hold_sd)):
            self.cap_probe = False
            self.step_up(True)
            return
        if n < CAP_STAY * need:
            return
        self.cap_probe = False
        self.cap = self.lvl
        self.probing = False
        self.judge_from()

    def after(self, latency, late):
        """LS served one request on the current tier (latency us, late 0/1): the rules' decision after it."""
        p, need = self.p, self.p.shrink_requests
        # a late request that continues a run of lates weighs --late-in-run (1: as slo_aware counts)
        prev, self.prev_late = self.prev_late, late
        if p.dispersion:  # lates as a two-state Markov chain: phi = 2 x lates per run - 1 (prior: singleton runs)
            self.run_lates += late
            self.runs += late and not prev
            self.phi = max(1.0, min(p.dispersion_max, 2.0 * (self.run_lates + p.dispersion_prior) /
                                    (self.runs + p.dispersion_prior) - 1.0))
            self.top_budget = self.share * BUDGET_REQUESTS * self.phi
        late *= p.late_in_run if prev else 1.0
        self.req += 1
        self.over += late
        self.window.append(latency)
        if len(self.window) > DS_REQUEST_WINDOW:
            self.window.pop(0)
        if self.grace:
            if self.req - self.base_req >= self.grace:
                self.grace = 0
                self.judge_from()
            return
        self.budget = max(-self.top_budget, min(self.top_budget, self.budget + self.share - late))
        if p.tier_memory:
            keep = 1.0 - 1.0 / p.tier_memory
            self.rec_n = [x * keep for x in self.rec_n]
            self.rec_late = [x * keep for x in self.rec_late]
            self.rec_n[self.lvl] += 1
            self.rec_late[self.lvl] += late
        n, lates = self.req - self.base_req, self.over - self.base_over
        if self.cap_probe:
            self.overload_probe(n, lates)
            return
        probe_failed = self.probing and (
            self.clearly_over(self.share, n, lates, p.probe_fail_sd) or
            (n >= p.probe_max * need and lates > self.allowed(self.share, n, p.probe_hold_sd)))
        if probe_failed or (self.budget < 0 and lates >= 1):
            top = len(self.ladder) - 1
            if self.lvl >= top or self.lvl == self.cap:
                self.overload(n, lates, self.lvl >= top)
                return
            self.step_up(False)
            return
        full = self.top_budget
        if self.budget >= full and (self.cap >= 0 or self.warned_top):
            self.cap, self.cap_probe, self.warned_top = -1, False, False
            self.cap_failed = [False] * len(self.ladder)
        if self.probing and n >= p.probe_hold * need and lates <= self.allowed(self.share, n, p.probe_hold_sd):
            self.probing = False
            return
        if self.by_shrink and n >= 4 * need:
            self.fails[self.lvl] = 0
            self.by_shrink = False
        stay = DS_REQUEST_WINDOW if self.by_shrink and need < DS_REQUEST_WINDOW else need
        if self.lvl <= 0 or self.probing or n < stay or self.budget < full or \
                self.req - self.entered_req < p.dwell_requests or self.req < self.retry[self.lvl - 1]:
            return
        if p.tier_memory and self.rec_late[self.lvl - 1] > self.allowed(self.share, self.rec_n[self.lvl - 1],
                                                                        p.memory_sd):
            return
        if p.headroom and not self.headroom(self.lvl - 1):
            self.retry[self.lvl - 1] = self.req + DS_REQUEST_WINDOW
            return
        to = self.lvl - 1
        descent = p.descent == "always" or (p.descent == "first" and not self.grown)
        while descent and to > 0 and self.req >= self.retry[to - 1] and self.headroom(to - 1):
            to -= 1
        self.enter(to, "down")

    def headroom(self, to):
        """The window's p99 scaled to tier `to` (by sqrt(SM ratio), to --headroom-exp) is within the SLO."""
        ratio = self.ladder[self.lvl] / self.ladder[to]
        return p99(self.window) / self.slo * math.sqrt(ratio) ** self.p.headroom_exp <= 1.0


def replay(static, settle, ladder, start_sms, slo_us, p):
    """The tier index chosen for every request (settle and window) and the chosen requests' lates."""
    z = Sizing(ladder, start_sms, slo_us, p)
    total = len(next(iter(static.values())))
    tiers, lates = [], []
    for j in range(total):
        lvl = z.lvl
        lat, late, _ = static[ladder[lvl]][j]
        tiers.append(lvl)
        lates.append(late)
        z.after(lat, late)
    return tiers, lates


def self_test(p):
    """The port on synthetic traces, as tests/test_slo_aware.c drives the policy: 0 if it behaves."""
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


def main(argv=None):
    ap = argparse.ArgumentParser(prog="dsbench replay-sizing", description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep", nargs="?", help="the colocate --sweep JSON (SLO, target, BE per tier per repetition)")
    ap.add_argument("traces", nargs="?", help="its --trace-dir, or a tar archive of it")
    ap.add_argument("--self-test", action="store_true", help="check the port on synthetic traces and exit")
    ap.add_argument("--load", help="one load only (e.g. 0.30)")
    ap.add_argument("--start", type=int, default=64, help="first tier, SMs (slo_aware's ls_sms; default 64)")
    ap.add_argument("--target", type=float,
                    help="the rules' attainment target (default: the sweep's, which the verdict uses)")
    ap.add_argument("--shrink-requests", type=int, default=128)
    ap.add_argument("--dwell-us", type=float, default=20000.0,
                    help="least time on a tier before a step down, as requests at the load's rate (default 20000)")
    ap.add_argument("--probe-fail-sd", type=float, default=2.0)
    ap.add_argument("--probe-hold-sd", type=float, default=1.0)
    ap.add_argument("--probe-hold", type=int, default=2, help="x shrink_requests before a probe holds")
    ap.add_argument("--probe-max", type=int, default=4, help="x shrink_requests before an unheld probe fails")
    ap.add_argument("--no-full-budget-up", dest="full_budget_up", action="store_false",
                    help="a step up gets half the budget back (before 699278d)")
    ap.add_argument("--refund-probe", action="store_true", help="with --no-full-budget-up: full after a probe")
    ap.add_argument("--late-in-run", type=float, default=1.0,
                    help="weight of a late request that follows a late one, in every count (default 1; 0: "
                         "runs of lates count once, against lates' overdispersion)")
    ap.add_argument("--no-dispersion", dest="dispersion", action="store_false",
                    help="a budget of 512 requests' worth however lates bunch up (slo_aware up to ffeca52)")
    ap.add_argument("--dispersion-sd", action="store_true",
                    help="the probe and overload tests' SDs scaled by the dispersion too")
    ap.add_argument("--dispersion-prior", type=float, default=4.0, help="singleton runs assumed at the start")
    ap.add_argument("--dispersion-max", type=float, default=4.0)
    ap.add_argument("--backoff-after-hold", action="store_true",
                    help="growth from a tier held for long (4 x shrink_requests since its probe) backs the step down "
                         "to it off too (slo_aware up to ffeca52)")
    ap.add_argument("--cap-sd", type=float, default=2.0)
    ap.add_argument("--cap-hold-sd", type=float, default=None, help="an overload check holds only within this")
    ap.add_argument("--headroom-exp", type=float, default=1.0,
                    help="headroom scales the window p99 by sqrt(SM ratio) to this power (default 1)")
    ap.add_argument("--no-headroom", dest="headroom", action="store_false", help="step down without headroom")
    ap.add_argument("--descent", choices=("first", "none", "always"), default="first",
                    help="steps down past several tiers at once, to the smallest the headroom allows: until LS "
                         "first steps up (default, as slo_aware), never (one tier per step down, as slo_aware up "
                         "to e11eaab), or always")
    ap.add_argument("--tier-memory", type=float, default=0.0,
                    help="each tier's record of judged requests and lates, decayed by 1 - 1/R per request; a step "
                         "down to a tier whose record is over the allowance (--memory-sd) is not made (0: off)")
    ap.add_argument("--memory-sd", type=float, default=1.0)
    ap.add_argument("--shifts", type=int, default=1,
                    help="also replay each repetition from K-1 other starts in its requests (rotated), and count "
                         "the verdicts that hold: how robust a rule is to where its lates fall")
    ap.add_argument("--concat", action="store_true",
                    help="replay the repetitions back to back as one run (with --shifts starts), the fixed splits "
                         "judged on the same requests")
    ap.add_argument("--verbose", action="store_true", help="every repetition")
    p = ap.parse_args(argv)
    if p.self_test:
        p.target = p.target or 0.99
        p.late_in_run = 1.0
        p.dispersion, p.dispersion_sd, p.backoff_after_hold = True, False, False
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
