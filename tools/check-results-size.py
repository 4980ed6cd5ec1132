#!/usr/bin/env python3
"""docs/results/ holds the current result of each benchmark per device and
stays small enough to clone with the code: at most LIMIT bytes in all. Over
it, this prints the largest files and exits 1 (older runs leave the tree: git
keeps them).

    python3 tools/check-results-size.py [REPO_ROOT] [--limit BYTES]
"""
import argparse
import os
import sys

LIMIT = 5_000_000


def sizes(root):
    """[(bytes, path relative to root)] of every file under root/docs/results."""
    base = os.path.join(root, "docs", "results")
    out = []
    for d, _, files in os.walk(base):
        for f in files:
            p = os.path.join(d, f)
            out.append((os.path.getsize(p), os.path.relpath(p, root)))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--limit", type=int, default=LIMIT, help="bytes (default %(default)s)")
    a = ap.parse_args(argv)
    files = sizes(a.root)
    if not files:
        print(f"check-results-size: no files under {os.path.join(a.root, 'docs', 'results')}", file=sys.stderr)
        return 1
    total = sum(s for s, _ in files)
    print(f"docs/results: {len(files)} files, {total} bytes (limit {a.limit})")
    if total <= a.limit:
        return 0
    print("over the limit; the largest files:", file=sys.stderr)
    for s, p in sorted(files, reverse=True)[:10]:
        print(f"  {s:>9}  {p}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
