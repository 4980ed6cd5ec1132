"""serve's command line as a user meets it (smoke test serve_cli), on the
simulated device with a few requests of one layer: --help exits 0, an --out
that cannot be written is refused before the run, both tables stay aligned
for the longest mode name and carry a legend, and a trace shorter than the
run or with requests above --max-ctx is warned about on stderr, once; the
prefill flags are range-checked and recorded.

usage: check_cli.py SERVE_BINARY SCRATCH_DIR
"""
import json
import os
import subprocess
import sys

exe, scratch = sys.argv[1], sys.argv[2]
QUICK = ["--device", "sim", "--layers", "1", "--requests", "4", "--reps", "1", "--loads", "0.5",
         "--capacity-rps", "20", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "200"]


def run(*args):
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=120)


MODES = {"single", "pdmux_static", "slo_aware", "slo_aware_nogates", "tpot_first", "priority", "static@32"}


def is_row(line):
    """A row of either table: a load (" 0.50 ...") or a mode name first."""
    return line[:2] == " 0" or line.split(" ")[0] in MODES


def table(out, first):
    """The table whose header starts with `first` (its rows) and the lines after it."""
    lines = out.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith(first))
    end = start + 1
    while end < len(lines) and is_row(lines[end]):
        end += 1
    return lines[start:end], lines[end:]


r = run("--help")
assert r.returncode == 0 and r.stdout.startswith("usage: serve") and not r.stderr, r
assert "ds_info" not in r.stdout

for bad in ("/nonexistent-folder/serve.json", os.devnull + "/serve.json"):
    r = run(*QUICK, "--colocate", "0", "--out", bad)
    assert r.returncode == 2, (bad, r)
    assert "serve: --out %s: cannot write it" % bad in r.stderr, (bad, r.stderr)
    assert "capacity" not in r.stdout and "rep 0" not in r.stdout, "ran before --out %s was refused:\n%s" % (
        bad, r.stdout)

# both tables with the longest mode name: every row as long as its header,
# and a legend that explains the TTFT> / TPOT> columns
r = run(*QUICK, "--colocate", "0.5", "--modes", "slo_aware_nogates,static@32")
assert r.returncode == 0, r
for first, legend in ((" load mode", "TTFT>, TPOT>    share of requests over the TTFT SLO"),
                      ("mode ", "BE                BE training steps/s over BE alone")):
    rows, after = table(r.stdout, first)
    assert len(rows) >= 3, (first, rows)
    widths = {len(l.rstrip()) if "(TPOT p99" not in l else len(l.split("   (")[0]) for l in rows}
    assert len(widths) == 1, "table %r misaligned:\n%s" % (first, "\n".join(rows))
    assert any(legend in l for l in after[:8]), "no legend under the table %r:\n%s" % (first, "\n".join(after[:8]))
assert "no usable" not in r.stderr and "warning" not in r.stderr, r.stderr  # the shipped trace: no warnings

# a trace of 3 requests, one above --max-ctx: a run of 2 x 4 wraps it
os.makedirs(scratch, exist_ok=True)
trace = os.path.join(scratch, "short_trace.csv")
with open(trace, "w") as f:
    f.write("TIMESTAMP,ContextTokens,GeneratedTokens\n0,100,10\n1,9000,300\n2,50,5\n")
r = run(*QUICK, "--colocate", "0", "--modes", "single", "--reps", "2", "--trace", trace, "--max-ctx", "1024")
assert r.returncode == 0, r
wrap = "serve: warning: the trace has 3 requests and this run replays 8"
cap = "serve: warning: --max-ctx 1024: 1 of the 3 trace requests replayed are longer"
assert r.stderr.count(wrap) == 1, r.stderr
assert r.stderr.count(cap) == 1, r.stderr
assert "longest 9300 tokens" in r.stderr, r.stderr
# the prefill placement flags: out of range refused before the run; in range,
# set on both slo_aware variants and recorded in the JSON
for flag, bad in (("--prefill-whole", "3"), ("--prefill-press", "2"), ("--reserve", "2")):
    r = run(*QUICK, "--colocate", "0", flag, bad)
    assert r.returncode != 0 and "serve: %s: '%s' is not an integer" % (flag, bad) in r.stderr, (flag, r)
    assert "capacity" not in r.stdout, r.stdout
out = os.path.join(scratch, "prefill.json")
r = run(*QUICK, "--colocate", "0", "--modes", "slo_aware", "--prefill-whole", "1", "--prefill-press", "1",
        "--reserve", "0", "--out", out)
assert r.returncode == 0, r
with open(out) as f:
    params = json.load(f)["policy_params"]
assert params["prefill_whole"] == 1 and params["prefill_press"] == 1 and params["reserve"] == 0, params
print("serve command line: ok")
