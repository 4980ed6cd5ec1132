"""bench/dsbench make-trace: synthetic traces in the code trace's CSV format,
the same for a seed, with the lengths and the arrival shape asked for."""
import csv
import math
import statistics
import sys

import pytest
from conftest import REPO_ROOT

# bench/ on the path only for this import: left there, its torch/ folder
# would shadow PyTorch for the tests collected after this one
sys.path.insert(0, str(REPO_ROOT / "bench"))
try:
    from dsbench import make_trace  # noqa: E402
finally:
    sys.path.remove(str(REPO_ROOT / "bench"))


def quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


@pytest.mark.parametrize("shape", sorted(make_trace.SHAPES))
def test_lengths_have_the_shapes_median_and_p99(shape):
    rows = make_trace.make(shape, 20000, "poisson", 7, 1 << 20)  # no cut: the distribution itself
    (pp50, pp99), (op50, op99) = make_trace.SHAPES[shape]
    for got, p50, p99 in (([r[1] for r in rows], pp50, pp99), ([r[2] for r in rows], op50, op99)):
        assert quantile(got, 0.5) == pytest.approx(p50, rel=0.05)
        assert quantile(got, 0.99) == pytest.approx(p99, rel=0.12)


def test_every_request_fits_the_context_and_arrivals_are_ordered():
    rows = make_trace.make("long-prompts", 5000, "bursty", 3, 8192)
    assert all(p >= 1 and o >= 1 and p + o <= 8192 for _, p, o in rows)
    assert all(a[0] <= b[0] for a, b in zip(rows, rows[1:]))


def test_arrivals_average_one_per_second_and_bursty_is_burstier():
    n = 20000
    gaps = {}
    for kind in make_trace.ARRIVALS:
        ts = make_trace.arrival_times(__import__("random").Random(5), n, kind)
        assert ts[-1] / n == pytest.approx(1.0, rel=0.1)
        g = [b - a for a, b in zip(ts, ts[1:])]
        gaps[kind] = statistics.pstdev(g) / statistics.fmean(g)
    assert gaps["poisson"] == pytest.approx(1.0, abs=0.05)  # exponential gaps: coefficient of variation 1
    assert gaps["bursty"] > 1.5


def test_the_file_is_the_traces_format_and_the_same_for_a_seed(tmp_path):
    a, b, c = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "c.csv"
    assert make_trace.main(["conversation", "--out", str(a), "--requests", "50"]) == 0
    assert make_trace.main(["conversation", "--out", str(b), "--requests", "50"]) == 0
    assert make_trace.main(["conversation", "--out", str(c), "--requests", "50", "--seed", "2"]) == 0
    assert a.read_text() == b.read_text() != c.read_text()
    rows = list(csv.reader(a.open()))
    assert rows[0] == ["TIMESTAMP", "ContextTokens", "GeneratedTokens"] and len(rows) == 51
    ts = rows[1][0]
    assert len(ts) == len("2023-11-16 18:17:03.9799600") and ts[10] == " " and ts[19] == "."
    assert make_trace.stamp(1.5) == "2026-01-01 00:00:01.5000000"
    assert not math.isnan(float(rows[1][1]))


@pytest.mark.parametrize("argv", [["nope", "--out", "x"], ["short"], ["short", "--out", "x", "--requests", "0"],
                                  ["short", "--out", "x", "--max-ctx", "1"]])
def test_bad_arguments_exit_2(argv):
    with pytest.raises(SystemExit) as e:
        make_trace.main(argv)
    assert e.value.code == 2


def test_an_unwritable_file_is_exit_1(tmp_path, capsys):
    assert make_trace.main(["short", "--out", str(tmp_path / "no" / "x.csv")]) == 1
    assert "No such file" in capsys.readouterr().err
