"""colocate's command line as a user meets it (smoke test colocate_cli), on the
simulated device with a few requests: --help exits 0 and names only tools that
exist, an --out that cannot be written is refused before any configuration
runs, every table has a legend under it, and a refused --param is reported
once.

usage: check_cli.py COLOCATE_BINARY SCRATCH_DIR
"""
import json
import os
import subprocess
import sys

exe, scratch = sys.argv[1], sys.argv[2]
QUICK = ["--device", "sim", "--requests", "20", "--settle", "0", "--configs", "priority"]


def run(*args):
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=120)


r = run("--help")
assert r.returncode == 0 and r.stdout.startswith("usage: colocate") and not r.stderr, r
assert "ds_info" not in r.stdout, "--help names a tool that does not exist"

r = run("--bogus")
assert r.returncode == 2 and "unknown option --bogus" in r.stderr, r

# a missing folder, and a path under a file: refused before the run
for bad in ("/nonexistent-folder/colocate.json", os.devnull + "/colocate.json"):
    r = run(*QUICK, "--out", bad)
    assert r.returncode == 2, (bad, r)
    assert "colocate: --out %s: cannot write it" % bad in r.stderr, (bad, r.stderr)
    assert "done:" not in r.stdout, "a configuration ran before --out %s was refused:\n%s" % (bad, r.stdout)

# a writable path still gets the result
os.makedirs(scratch, exist_ok=True)
good = os.path.join(scratch, "colocate_cli.json")
if os.path.exists(good):
    os.remove(good)
r = run(*QUICK, "--out", good)
assert r.returncode == 0, r
assert "priority" in json.load(open(good))["configs"]

# every table printed has a legend under it: the single-load table (and its
# latency anatomy) and the sweep's
r = run(*QUICK)
assert r.returncode == 0, r
out = r.stdout.splitlines()
anatomy = next(i for i, l in enumerate(out) if l.startswith("LS latency anatomy"))
assert any(l.startswith(">SLO            share of LS requests") for l in out[anatomy:]), r.stdout
assert any(l.startswith("queue_wait      ") for l in out[anatomy:]), r.stdout
r = run("--device", "sim", "--sweep", "0.2", "--reps", "1", "--requests", "20", "--settle", "0",
        "--configs", "static@32")
assert r.returncode == 0, r
out = r.stdout.splitlines()
head = next(i for i, l in enumerate(out) if l.startswith("ls_p99_norm / be_tput_norm / ls_attainment"))
rows = [l for l in out[head + 2:head + 5] if l.split(" ")[0] in ("ls_alone", "static@32")]
assert len(rows) == 2, out[head:head + 6]
assert out[head + 4].startswith("cell: p99_norm/be_norm/attain%"), "no legend under the sweep table:\n%s" % (
    "\n".join(out[head:head + 6]))

# a parameter the policy refuses: one message, exit 2, nothing run
r = run(*QUICK, "--param", "slo_aware:bogus=1")
assert r.returncode == 2, r
assert r.stderr.count("no parameter 'bogus'") == 1, "reported %d times:\n%s" % (
    r.stderr.count("no parameter 'bogus'"), r.stderr)
assert "colocate: --param slo_aware:bogus=1" in r.stderr, r.stderr
assert "done:" not in r.stdout, r.stdout
print("colocate command line: ok")
