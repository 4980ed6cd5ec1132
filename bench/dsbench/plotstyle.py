"""The style and helpers every plot command shares: matplotlib (optional), one
colour and marker per serving mode and per PyTorch policy, the caption, the
saving of a figure, the reading of a result file.

matplotlib is imported here, once, with the Agg backend; where it is missing,
`plt` is None and each plot command says so in its own way (plot-results exits
0 so that a run script can call it unconditionally, the others exit 1).
"""
import json
import math
import os
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    plt = None

# One colour and marker per serving mode, the same in every figure of W5
# (plot-serve) and of the PyTorch serving benchmark (plot-serve-torch).
MODE_STYLE = {
    "single": ("#7f7f7f", "o"),
    "pdmux_static": ("#1f77b4", "s"),
    "slo_aware": ("#d62728", "^"),
    "tpot_first": ("#2ca02c", "D"),
}
EXTRA_COLOURS = ["#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf", "#ff7f0e"]

# One colour and marker per policy of the PyTorch pairs and co-location
# benchmarks (plot-torch), in the order the figures list them.
POLICY_STYLE = {
    "temporal": ("#7f7f7f", "o"),
    "shared": ("#1f77b4", "s"),
    "priority": ("#9467bd", "v"),
    "static": ("#ff7f0e", "P"),
    "balance": ("#8c564b", "X"),
    "slo_aware": ("#d62728", "^"),
    "tpot_first": ("#2ca02c", "D"),
}


def require_pyplot(prog, how="apt-get install python3-matplotlib, or pip install matplotlib"):
    """matplotlib.pyplot, or exit 1 with a message naming prog and how to install it."""
    if plt is None:
        sys.exit("%s: matplotlib is not installed for %s; install it (%s) and run again" % (prog, sys.executable, how))
    return plt


def finite(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def style(mode, modes):
    """(colour, marker) of a serving mode: MODE_STYLE's, else the next extra colour (by its place among
    `modes` not in MODE_STYLE) with a "v"."""
    if mode in MODE_STYLE:
        return MODE_STYLE[mode]
    extra = [m for m in modes if m not in MODE_STYLE]
    i = extra.index(mode) if mode in extra else 0
    return EXTRA_COLOURS[i % len(EXTRA_COLOURS)], "v"


def static_sms(name):
    """N of a "static@N" configuration or mode, else None."""
    if isinstance(name, str) and name.startswith("static@"):
        try:
            return int(name[len("static@"):])
        except ValueError:
            return None
    return None


def caption(d, before_commit=(), after_commit=()):
    """The result file's origin for a figure's foot: device, SIMULATED (where the file says so), driver,
    `before_commit`, commit, `after_commit`; the parts the file has, joined by commas."""
    parts = []
    if d.get("device"):
        parts.append(str(d["device"]))
    if d.get("simulated"):
        parts.append("SIMULATED")
    if d.get("driver"):
        parts.append("driver " + str(d["driver"]))
    parts += before_commit
    if d.get("commit"):
        parts.append("commit " + str(d["commit"]))
    parts += after_commit
    return ", ".join(parts)


def finish(fig, text, path, rect_top=1.0):
    """Writes fig to path (150 dpi) with `text` (the caption, if any) at its foot, closes it, says so."""
    if text:
        fig.text(0.01, 0.005, text, fontsize=7, color="#555555", ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.03, 1, rect_top))
    fig.savefig(path, dpi=150)
    plt.close(fig)
    print("wrote " + path)


def read_json(path, prog):
    """The JSON in path, or exit 1 with a message naming prog."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        sys.exit("%s: cannot read %s: %s" % (prog, path, e))


def read_result(path, prog):
    """A result file: its JSON object, or exit 1 with a message naming prog."""
    d = read_json(path, prog)
    if not isinstance(d, dict):
        sys.exit("%s: %s is not a JSON object" % (prog, path))
    return d


def out_dir(out, result):
    """The folder for a result file's figures: `out`, else the file's own; made if missing."""
    out = out or os.path.dirname(os.path.abspath(result))
    os.makedirs(out, exist_ok=True)
    return out
