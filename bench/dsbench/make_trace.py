"""Synthetic request traces in the Azure LLM trace's CSV format, for serving
benchmarks on arrival and length shapes other than the repository's code trace.

    python3 bench/dsbench make-trace SHAPE --out FILE [--requests 2000] [--arrivals poisson|bursty]
                                     [--seed 1] [--max-ctx 8192]

Writes `TIMESTAMP,ContextTokens,GeneratedTokens` rows (as data/traces/README.md
describes), which `serve --trace FILE` and bench/torch/serve_torch.py read; both
scale the arrival times to the load they run, so only the arrivals' shape
matters here, not their rate (one request per second on average).

Lengths (SHAPES): prompt and output lengths each drawn from a log-normal
distribution given by its median and 99th percentile (sigma = ln(p99 / p50) /
2.3263, the 99% quantile of the standard normal), rounded, at least 1, and
the prompt cut so that prompt + output fits --max-ctx (the code trace's
property: every request fits 8192 tokens). The shapes are stress cases for a
serving policy, not models of a particular service:

  conversation   prompts p50 1020, p99 6000; outputs p50 129, p99 601 (long
                 answers to long histories: decode-heavy with large prefills)
  long-prompts   prompts p50 4096, p99 7600; outputs p50 32, p99 256 (prefill-heavy)
  long-outputs   prompts p50 256, p99 1024; outputs p50 512, p99 2048 (decode-heavy)
  short          prompts p50 128, p99 512; outputs p50 16, p99 64 (many small requests)

Arrivals: `poisson`, exponential gaps (a memoryless stream); `bursty`, a
two-state Markov-modulated Poisson process (the stream switches between a
burst state at 4x the mean rate and a quiet state at 0.25x, each state lasting
an exponential time of mean 5 s; the rates are renormalised so the whole
trace averages one request per second), the on/off pattern of
W. Fischer and K. Meier-Hellstern, "The Markov-modulated Poisson process
(MMPP) cookbook", Performance Evaluation 18(2), 1993.

The same seed gives the same file. Exit 2 on a bad argument, 1 when FILE
cannot be written.
"""
import argparse
import datetime
import math
import random
import sys

Z99 = 2.3263478740408408  # the standard normal's 99% quantile

# shape: ((prompt p50, p99), (output p50, p99))
SHAPES = {
    "conversation": ((1020, 6000), (129, 601)),
    "long-prompts": ((4096, 7600), (32, 256)),
    "long-outputs": ((256, 1024), (512, 2048)),
    "short": ((128, 512), (16, 64)),
}
ARRIVALS = ("poisson", "bursty")
BURST_RATE, QUIET_RATE, STATE_MEAN_S = 4.0, 0.25, 5.0
START = datetime.datetime(2026, 1, 1)


def lognormal(rng, p50, p99):
    """One draw of the log-normal with this median and 99th percentile, rounded, at least 1."""
    sigma = math.log(p99 / p50) / Z99
    return max(1, int(round(p50 * math.exp(sigma * rng.gauss(0.0, 1.0)))))


def arrival_times(rng, n, kind):
    """n arrival times (s from 0), one request per second on average."""
    t, out = 0.0, []
    if kind == "poisson":
        for _ in range(n):
            out.append(t)
            t += rng.expovariate(1.0)
        return out
    # bursty: the two states equally likely, so the mean rate is the mean of the two; scaled to 1 / s
    scale = 2.0 / (BURST_RATE + QUIET_RATE)
    rates = (BURST_RATE * scale, QUIET_RATE * scale)
    state = rng.randrange(2)
    switch = rng.expovariate(1.0 / STATE_MEAN_S)
    while len(out) < n:
        gap = rng.expovariate(rates[state])
        if t + gap >= switch:  # memoryless: the next arrival is drawn again in the new state
            t, state = switch, 1 - state
            switch = t + rng.expovariate(1.0 / STATE_MEAN_S)
            continue
        t += gap
        out.append(t)
    return out


def make(shape, n, arrivals, seed, max_ctx):
    """[(time s, prompt tokens, output tokens)] of the shape, in arrival order."""
    rng = random.Random(seed)
    (pp50, pp99), (op50, op99) = SHAPES[shape]
    rows = []
    for t in arrival_times(rng, n, arrivals):
        out = min(lognormal(rng, op50, op99), max_ctx - 1)
        prompt = min(lognormal(rng, pp50, pp99), max_ctx - out)
        rows.append((t, prompt, out))
    return rows


def stamp(t):
    """The trace's TIMESTAMP: YYYY-MM-DD hh:mm:ss.fffffff (100 ns)."""
    d = START + datetime.timedelta(seconds=t)
    return d.strftime("%Y-%m-%d %H:%M:%S.") + "%07d" % (d.microsecond * 10)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="dsbench make-trace", description=__doc__.splitlines()[0])
    ap.add_argument("shape", choices=sorted(SHAPES), help="the length shape (see the module's text)")
    ap.add_argument("--out", required=True, help="the CSV to write")
    ap.add_argument("--requests", type=int, default=2000, help="rows (default 2000)")
    ap.add_argument("--arrivals", choices=ARRIVALS, default="poisson", help="arrival process (default poisson)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-ctx", type=int, default=8192, help="prompt + output fit this many tokens (default 8192)")
    a = ap.parse_args(argv)
    if a.requests < 1:
        ap.error("--requests must be at least 1")
    if a.max_ctx < 2:
        ap.error("--max-ctx must be at least 2")
    rows = make(a.shape, a.requests, a.arrivals, a.seed, a.max_ctx)
    try:
        with open(a.out, "w") as f:
            f.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
            for t, p, o in rows:
                f.write("%s,%d,%d\n" % (stamp(t), p, o))
    except OSError as e:
        print("make-trace: %s: %s" % (a.out, e.strerror), file=sys.stderr)
        return 1
    ps, os_ = sorted(r[1] for r in rows), sorted(r[2] for r in rows)
    print("make-trace: %s: %d requests over %.0f s (%s), prompts p50 %d p99 %d, outputs p50 %d p99 %d" % (
        a.out, len(rows), rows[-1][0], a.arrivals, ps[len(ps) // 2], ps[min(len(ps) - 1, int(0.99 * len(ps)))],
        os_[len(os_) // 2], os_[min(len(os_) - 1, int(0.99 * len(os_)))]))
    return 0
