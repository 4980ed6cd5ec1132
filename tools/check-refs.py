#!/usr/bin/env python3
"""Checks that the tree's text files only point at things a reader can find.

    check-refs.py [ROOT]        check the tree at ROOT (default: this file's ../)
    check-refs.py --self-test   run the checker on a small made-up tree

Exits 1 and prints `file:line: reason` for each hit when a text file

  1. refers to a path that is not in the tree: a relative path whose first
     component is a top-level entry of the repository (src/..., docs/...) or
     that starts with ../, or a bare document name ending in .md (README.md).
     A path may resolve against the repository root or against the directory
     of the file that names it. Tokens with a glob or a placeholder (* < > { }
     $ @ ...) are skipped, and so are absolute paths (/usr/...). Build
     outputs may be absent: build/, build-*/, docs/api/ and the anchored paths
     of .gitignore. The allow-lists below name the few other exceptions;
  2. uses words of the development process rather than of the project:
     "lent" (a lent GPU), the shell variable OUT written with a leading $, the
     folder .crit, "issue <number>", the notes folder beside the checkout, the
     sandbox's library folder;
  3. in src/ and include/, has a comment that cites an issue or pull request
     by number: "(#12)", "[#12]", "bug #12", "PR #12", "fixes #12", "gh-12",
     "issue#12" (and, like every file, "issue 12" and "issue #12"). Comments
     are those of C (/* */, //) in .c, .h, .cu, .cuh and .map files; in other
     files of those folders every line counts. Another project's tracker
     (Owner/Repo#12, Owner/Repo issue 12, a github.com address) is a source
     and may be cited.

Which files: `git ls-files --cached --others --exclude-standard` (tracked files
and new files not yet added, but not ignored ones) in a git checkout; else
every file under ROOT except build*/, .git/ and the folders that .gitignore
names at the top level. Not checked: binary files, raw results
(docs/results/<device>/*.json, *.jsonl, *.txt, which hold commands as they were run),
the trace copy (data/traces/*.csv), the fuzz corpus, this file and
tools/check-layers.py (the made-up trees of its self-test).

Registered as the meson tests `check_refs` and `check_refs_selftest`.
Standard library only.
"""
import os
import re
import subprocess
import sys
import tempfile

# Top-level entries of the repository that a relative path may start with.
TOP_DIRS = ("include", "src", "docs", "examples", "tests", "tools", "bindings",
            "data", "subprojects", ".ci")

# Files that are not checked (paths relative to the root, fnmatch-like).
EXCLUDE = (
    re.compile(r"^data/traces/.*\.csv$"),              # trace copy (data)
    re.compile(r"^docs/results/(?:[^/]+/)*[^/]*\.(json|jsonl|txt)$"),  # raw results, per device
    re.compile(r"^tests/fuzz/corpus/"),                # fuzz inputs
    re.compile(r"^tools/check-refs\.py$"),             # this checker
    re.compile(r"^tools/check-layers\.py$"),           # its self-test's made-up src/ trees
)

# Referenced paths that need not exist in the tree: build outputs and the
# generated API reference.
ALLOWED_PREFIXES = (
    re.compile(r"^build(-[^/]*)?(/|$)"),
    re.compile(r"^docs/api(/|$)"),
)

# Files that write text for other folders: their paths also resolve there.
WRITES_INTO = {
    # docs/results/README.md and a README.md in each device's folder
    "bench/dsbench/results_readme.py": ("docs/results", "docs/results/h100", "docs/results/h200"),
}

# Paths that look like ours but are not, one file at a time:
# (referring file, token as written) -> why it may stay.
ALLOW = {
    ("tests/fuzz/run.sh", "src/ds_device_kernels_fatbin.c"):
        "a ninja target, relative to the build folder",
}
# Paths that look like ours but are not, in any file: token -> why.
ALLOW_TOKENS = {
    "data/AzureLLMInferenceTrace_code.csv":
        "the trace's path in the Azure Public Dataset, the source of data/traces",
}
# Paths inside other projects cited as sources, whose first component happens
# to be one of ours (src/, include/, tests/...): a line that matches one of
# these is not checked for paths. Add a project here when a comment cites it.
ALLOW_LINE = (
    re.compile(r"\bNCCL\b"),               # NCCL src/misc/cudawrap.cc, src/include/param.h
    re.compile(r"\bliburing\b"),           # liburing src/liburing.map, test/helpers.h
    re.compile(r"sgl-project/sglang"),      # SGLang python/sglang/...
    re.compile(r"AzurePublicDataset"),      # Azure's data/AzureLLMInferenceTrace_*.csv
)

# Development-process words: (compiled pattern, reason).
PROCESS = (
    (re.compile(r"(?i)\blent\b"),
     'development-process word "lent" (say "the GPU machine")'),
    (re.compile(r"\$" + r"OUT\b"),
     "development-process variable $" + "OUT (name the output folder)"),
    (re.compile(r"(?<![\w-])\.crit\b"),
     "development-process folder .crit (say what it holds)"),
    (re.compile(r"(?i)\bissues?\s+#?\d+\b"),
     "issue number (say what the code does, not which issue asked for it)"),
    (re.compile(r"\.\./" r"shared\b"),
     "path outside the repository (.." "/shared)"),
    (re.compile(r"/work/\." r"library\b"),
     "path of the development sandbox (/work/." "library)"),
)
# "Owner/Repo issue 274" or a GitHub URL on the line cites another project's
# tracker: that is a source, not our history.
EXTERNAL_ISSUE = re.compile(r"[\w.-]+/[\w.-]+\s+issues?\s+#?\d+|github\.com/")

# Issue and pull-request numbers in comments of src/ and include/ (rule 3);
# "issue 12" and "issue #12" are PROCESS's, everywhere.
SOURCE_ISSUE = (
    re.compile(r"[(\[]#\d+[)\]]"),
    re.compile(r"(?i)\b(?:bugs?|prs?|pull(?:\s+request)?|tickets?|fix(?:es|ed)?|close[sd]?|see|refs?)"
               r"\s*#\d+\b"),
    re.compile(r"(?i)\bgh-\d+\b"),
    re.compile(r"(?i)\bissues?#\d+\b"),
)
SOURCE_ISSUE_WHY = "issue number in a comment (say what the code does, not which issue or change asked for it)"
# Another project's tracker: Owner/Repo#12 is a source.
EXTERNAL_REF = re.compile(r"[\w.-]+/[\w.-]+#\d+")
C_LIKE = (".c", ".h", ".cu", ".cuh", ".map")

# A path-like token: the characters a path, glob or placeholder is made of.
TOKEN = re.compile(r"(?<![\w./+~@-])[\w.+~@/*<>{}$-]+")
SKIP_CHARS = set("*<>{}$@")  # globs, placeholders, meson's @0@ and @INPUT@


def ignored_paths(root):
    """Anchored paths without globs that the root .gitignore names (/name/,
    /tools/x): build outputs and local folders, allowed to be absent."""
    paths = set()
    try:
        with open(os.path.join(root, ".gitignore"), encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line.startswith("/") and not set("*?[!") & set(line):
                    paths.add(line.strip("/"))
    except OSError:
        pass
    return paths


def list_files(root):
    """(files to check, every file and directory of the tree), root-relative."""
    files = None
    if os.path.exists(os.path.join(root, ".git")):
        try:
            out = subprocess.run(
                ["git", "-C", root, "ls-files", "-z", "--cached", "--others",
                 "--exclude-standard"],
                check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout
            files = sorted({f for f in out.decode("utf-8", "surrogateescape").split("\0")
                            if f and os.path.isfile(os.path.join(root, f))})
        except (OSError, subprocess.CalledProcessError):
            files = None
    if files is None:
        files = walk(root)
    tree = set(files)
    for f in files:
        d = os.path.dirname(f)
        while d and d not in tree:
            tree.add(d)
            d = os.path.dirname(d)
    return files, tree


def walk(root):
    ignored = {".git"} | {p for p in ignored_paths(root) if "/" not in p}
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        dirnames[:] = sorted(
            d for d in dirnames
            if d not in ("__pycache__",) and not (
                rel == "." and (d in ignored or d == "build" or d.startswith("build-"))))
        for name in sorted(filenames):
            path = os.path.normpath(os.path.join(rel, name))
            if not name.endswith(".pyc"):
                files.append(path.replace(os.sep, "/"))
    return files


def read_text(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def resolve(tok, referrer, tree, ignored):
    """True when tok names an entry of the tree (or one allowed to be absent)."""
    bases = ["", os.path.dirname(referrer)]
    bases.extend(WRITES_INTO.get(referrer, ()))
    for base in bases:
        p = os.path.normpath(os.path.join(base, tok)).replace(os.sep, "/")
        if p == ".." or p.startswith("../"):
            continue  # leaves the repository
        if p in tree or p == "." or any(a.match(p) for a in ALLOWED_PREFIXES):
            return True
        if any(p == i or p.startswith(i + "/") for i in ignored):
            return True
    return False


def path_tokens(line):
    """Yields path-like tokens of a line, cleaned, that the checker should resolve."""
    for m in TOKEN.finditer(line):
        tok = m.group(0)
        if "..." in tok.replace("../", "") or SKIP_CHARS & set(tok):
            continue
        tok = tok.rstrip(".,;:")
        if tok.startswith("./"):
            tok = tok[2:]
        if not tok or tok.startswith("/"):
            continue
        first = tok.split("/", 1)[0]
        if "/" in tok:
            if first not in TOP_DIRS and first != "..":
                continue
        elif not re.fullmatch(r"[\w.+-]+\.md", tok):
            continue
        yield m.start(), tok


def c_comments(text):
    """The comment text of each line of a C file (strings and code blanked)."""
    out, cur, i, n = [], [], 0, len(text)
    state = None  # None, "block", "line", '"' or "'"
    while i < n:
        ch = text[i]
        if ch == "\n":
            out.append("".join(cur))
            cur = []
            if state == "line":
                state = None
            i += 1
            continue
        if state is None:
            if text.startswith("/*", i):
                state, i = "block", i + 2
                cur.append("  ")
                continue
            if text.startswith("//", i):
                state, i = "line", i + 2
                cur.append("  ")
                continue
            if ch in "\"'":
                state = ch
            cur.append(" ")
        elif state == "block":
            if text.startswith("*/", i):
                state, i = None, i + 2
                cur.append("  ")
                continue
            cur.append(ch)
        elif state == "line":
            cur.append(ch)
        else:  # inside a string or character literal
            if ch == "\\":
                cur.append(" ")
                i += 1
            elif ch == state:
                state = None
            cur.append(" ")
        i += 1
    out.append("".join(cur))
    return out


def source_issue_hits(rel, text):
    """Rule 3: issue numbers in comments of src/ and include/."""
    if not rel.startswith(("src/", "include/")):
        return []
    lines = c_comments(text) if rel.endswith(C_LIKE) else text.splitlines()
    hits = []
    for n, line in enumerate(lines, 1):
        if EXTERNAL_ISSUE.search(line):
            continue
        line = EXTERNAL_REF.sub(" ", line)
        for pat in SOURCE_ISSUE:
            for m in pat.finditer(line):
                hits.append((rel, n, SOURCE_ISSUE_WHY + ": " + m.group(0).strip()))
    return hits


def check_file(rel, text, tree, ignored):
    hits = source_issue_hits(rel, text)
    for n, line in enumerate(text.splitlines(), 1):
        for pat, why in PROCESS:
            for m in pat.finditer(line):
                if why.startswith("issue") and EXTERNAL_ISSUE.search(line):
                    continue
                hits.append((rel, n, why + ": " + m.group(0).strip()))
        if any(a.search(line) for a in ALLOW_LINE):
            continue
        for _, tok in path_tokens(line):
            if (rel, tok) in ALLOW or tok in ALLOW_TOKENS or resolve(tok, rel, tree, ignored):
                continue
            hit = (rel, n, "no such path in the tree: " + tok)
            if hit not in hits:  # [a.md](a.md) names it twice
                hits.append(hit)
    return sorted(hits, key=lambda h: h[1])


def check(root):
    files, tree = list_files(root)
    ignored = ignored_paths(root)
    hits = []
    for rel in files:
        if any(e.search(rel) for e in EXCLUDE):
            continue
        text = read_text(os.path.join(root, rel))
        if text is None:
            continue  # binary or unreadable
        hits.extend(check_file(rel, text, tree, ignored))
    return hits


def report(hits, out=sys.stdout):
    for rel, n, why in hits:
        print("%s:%d: %s" % (rel, n, why), file=out)


def self_test():
    """Builds a tiny tree with good and bad references and checks the verdicts."""
    good = (
        "See src/a.c:12, docs/guide.md#setup and ../src/a.c (from docs/).\n"
        "Outputs go to build/x/y and build-gpu/z; the API is in docs/api/index.html.\n"
        "Globs and placeholders are skipped: src/*.c, docs/results/<file>, $DIR/src/x.\n"
        "Silent, equivalent and latent are words; threads issue 1M launches.\n"
        "Another project's tracker is a source: Snaipe/Criterion issue 274.\n"
        "Read README.md and guide.md. /usr/local/cuda/include is absolute.\n"
        "Model: NCCL src/misc/cudawrap.cc. Meson: 'src/@0@'.format(f).\n"
        "Built, not tracked (.gitignore): tools/gen/out.bin.\n"
        "Outside the source folders, (#12) and PR #3 are not looked for.\n"
    )
    bad_text = (
        "# A file with bad references.\n\n"
        "These lines must each give the hit below:\n"
        "the code is in src/missing.c.\n"
        "See BENCH" ".md, W1.\n"
        "Runs on the lent GPU.\n"
        "Writes to $" "OUT/x.json.\n"
        "Memory (issue 8).\n"
        "Traces in .." "/shared/traces.\n"
        "Criterion's packages are in .crit/.\n"
    )
    bad = {
        4: ["no such path in the tree: src/missing.c"],
        5: ["no such path in the tree: BENCH" ".md"],
        6: ['development-process word "lent"'],
        7: ["development-process variable $" "OUT"],
        8: ["issue number"],
        9: ["path outside the repository (.." "/shared)",
            "no such path in the tree: .." "/shared/traces"],
        10: ["development-process folder .crit"],
    }
    bad_c = (
        "/* A source file whose comments cite changes. */\n"
        "/* Fixed the race (#12). */\n"
        "int x; // see bug #7\n"
        "/* a block comment\n"
        " * over lines, [#31] and gh-4 */\n"
        "const char *s = \"(#3) bug #3\"; /* in a string: code */\n"
        "/* Another project's: Snaipe/Criterion#274. */ int y;\n"
        "int z; /* fixes #9 */\n"
    )
    bad_c_hits = {
        2: ["issue number in a comment"],
        3: ["issue number in a comment"],
        5: ["issue number in a comment", "issue number in a comment"],
        8: ["issue number in a comment"],
    }
    expected = {"docs/bad.md": bad, "src/b.c": bad_c_hits}
    ok = True
    with tempfile.TemporaryDirectory(prefix="check-refs-") as root:
        for rel, text in (("src/a.c", "int a;\n"), ("README.md", "src/a.c\n"),
                          (".gitignore", "/build*/\n/tools/gen/out.bin\n"),
                          ("docs/guide.md", good), ("docs/bad.md", bad_text),
                          ("src/b.c", bad_c),
                          ("build/stale.md", "MISSING.md\n")):
            os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
                f.write(text)
        hits = check(root)
        report(hits)
        got = {}
        for rel, n, why in hits:
            if rel not in expected:
                print("self-test: unexpected hit in %s:%d" % (rel, n))
                ok = False
            got.setdefault(rel, {}).setdefault(n, []).append(why)
        for rel, want_lines in sorted(expected.items()):
            have_lines = got.get(rel, {})
            for n in sorted(set(want_lines) | set(have_lines)):
                want, have = want_lines.get(n, []), have_lines.get(n, [])
                if len(want) != len(have) or not all(
                        any(h.startswith(w) for h in have) for w in want):
                    print("self-test: %s:%d: expected %r, got %r" % (rel, n, want, have))
                    ok = False
    print("self-test: %s" % ("ok (the good file passes, each bad line is caught)"
                             if ok else "FAILED"))
    return 0 if ok else 1


def main(argv):
    if argv[1:2] == ["--self-test"]:
        return self_test()
    if len(argv) > 2 or argv[1:2] and argv[1].startswith("-"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    hits = check(os.path.abspath(root))
    report(hits)
    if hits:
        print("check-refs: %d hit(s); see tools/check-refs.py for the rules" % len(hits),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
