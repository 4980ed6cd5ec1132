"""Strips machine paths from the text results in a folder, so that a device's
set goes into docs/results/<device> as it is.

usage: python3 bench/dsbench strip-paths DIR [PREFIX...]

In every .json, .jsonl, .txt and .log file directly in DIR, each absolute
prefix (DIR itself first, then each PREFIX, longest first) followed by a slash
is removed: the `command` of a JSON written with `--out /abs/DIR/x.json` reads
`--out x.json`, and DIR itself, named whole (`--out /abs/DIR`, as a tool that
writes a folder's files is told), reads `.`; a PREFIX of the repository root turns
/abs/root/data/traces/azure_llm_2023_code.csv into data/traces/azure_llm_2023_code.csv. tools/gpu-run.sh runs it
last with its output folder and the tree's root. Prints the files it changed;
exits 2 on a missing folder or a relative PREFIX. Standard library only.
"""
import os
import re
import sys

EXTENSIONS = (".json", ".jsonl", ".txt", ".log")


def strip(text, prefixes, folders=()):
    """text without each prefix + "/" (prefixes longest first, so that DIR goes before a root holding it),
    and each of `folders` named whole (followed by a space, a quote, a comma or the end of a line) as "."."""
    for f in sorted({f.rstrip("/") for f in folders if f.rstrip("/")}, key=len, reverse=True):
        text = re.sub(re.escape(f) + r"/?(?=[\s\"',]|$)", ".", text, flags=re.M)
    for p in sorted({p.rstrip("/") for p in prefixes if p.rstrip("/")}, key=len, reverse=True):
        text = text.replace(p + "/", "")
    return text


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.split("\n\n")[1].strip(), file=sys.stderr if not argv else sys.stdout)
        return 0 if argv else 2
    folder, prefixes = argv[0], argv[1:]
    if not os.path.isdir(folder):
        print(f"strip-paths: no folder {folder}", file=sys.stderr)
        return 2
    bad = [p for p in prefixes if not p.startswith("/")]
    if bad:
        print(f"strip-paths: a PREFIX is an absolute path, not {bad[0]}", file=sys.stderr)
        return 2
    folder = os.path.abspath(folder)
    # the folder as given and as resolved (a link in the path): both may appear
    folders = [folder, os.path.realpath(folder)]
    prefixes = folders + prefixes
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if not (name.endswith(EXTENSIONS) and os.path.isfile(path)):
            continue
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            text = f.read()
        new = strip(text, prefixes, folders)
        if new != text:
            with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(new)
            print(f"strip-paths: {name}")
    return 0
