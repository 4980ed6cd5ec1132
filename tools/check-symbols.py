#!/usr/bin/env python3
"""Checks that the shared library exports exactly the public API.

    check-symbols.py LIBRARY MAP INCLUDE_DIR [VERSION]

LIBRARY is the built libdetshare.so, MAP the version script it was linked
with (src/libdetshare.map), INCLUDE_DIR the public headers' root (include/).
Three lists must agree:

  - the functions declared DS_API in INCLUDE_DIR/detshare/*.h;
  - the names the map lists under `global:` (one per line, no globs);
  - the symbols the library exports (nm -D --defined-only, version nodes
    excluded).

The map's version nodes are DETSHARE_<major>.<minor>, oldest first, each
inheriting the one before; with VERSION (the project's, e.g. 0.2.0) the
newest must be that version's node: what a release adds goes there, and
the nodes of released versions keep their lists.

Exits 1 and prints, for each disagreement, the symbol and the line to add to
or remove from the map; exits 0 when they agree. Registered as the meson test
`symbol_map`. Set NM to use another nm. Standard library only.
"""
import os
import re
import subprocess
import sys

EXPORT_TYPES = set("TDBRVWGSiu")  # defined, global: text, data, bss, rodata, weak, ...
NAME = re.compile(r"[A-Za-z_]\w*")


def strip_comments(text):
    """C comments removed (newlines kept, so line numbers stay right)."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r"/\*.*?\*/|//[^\n]*", blank, text, flags=re.S)


def shown(path, include_dir):
    """path as a reader finds it: relative to the root that holds include/."""
    return os.path.relpath(path, os.path.dirname(os.path.abspath(include_dir)))


def header_api(include_dir):
    """{name: 'file:line'} of every DS_API declaration in include_dir/detshare/*.h."""
    api = {}
    hdir = os.path.join(include_dir, "detshare")
    for fname in sorted(os.listdir(hdir)):
        if not fname.endswith(".h"):
            continue
        path = os.path.join(hdir, fname)
        with open(path, encoding="utf-8") as f:
            text = strip_comments(f.read())
        for m in re.finditer(r"\bDS_API\b", text):
            line_start = text.rfind("\n", 0, m.start()) + 1
            if re.match(r"\s*#", text[line_start:m.start()] + " "):
                continue  # the macro's own #define / #if lines
            # The declaration runs to the first ';' or '{'; a function's name
            # is the identifier before its first '(' (a variable's the last
            # identifier before ';', '[' or '=').
            end = re.search(r"[;{]", text[m.end():])
            decl = text[m.end():m.end() + end.start()] if end else text[m.end():]
            paren = re.search(r"([A-Za-z_]\w*)\s*\(", decl)
            if paren and not re.match(r"\s*\(\s*\*", decl[paren.end() - 1:]):
                name = paren.group(1)
            else:
                names = NAME.findall(re.split(r"[\[=]", decl)[0])
                if not names:
                    continue
                name = names[-1]
            line = text.count("\n", 0, m.start()) + 1
            api.setdefault(name, "%s:%d" % (shown(path, include_dir), line))
    return api


def map_symbols(map_path):
    """(nodes, {name: (node, line)}, problems) of the version script."""
    with open(map_path, encoding="utf-8") as f:
        text = strip_comments(f.read())
    nodes, names, problems = [], {}, []
    node, scope = None, None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        m = re.match(r"^([A-Za-z_][\w.]*)\s*\{$", line)
        if m:
            node, scope = m.group(1), None
            nodes.append(node)
            continue
        if re.match(r"^\}\s*([A-Za-z_][\w.]*)?\s*;$", line):
            node, scope = None, None
            continue
        m = re.match(r"^(global|local)\s*:\s*(.*)$", line)
        if m:
            scope, line = m.group(1), m.group(2).strip()
            if not line:
                continue
        if node is None:
            problems.append("%s:%d: outside a version node: %s" % (map_path, n, raw.strip()))
            continue
        for entry in [e.strip() for e in line.split(";") if e.strip()]:
            if scope == "local":
                if entry != "*":
                    problems.append("%s:%d: `local:` holds only `*`, not %s" % (map_path, n, entry))
            elif set("*?[") & set(entry):
                problems.append("%s:%d: glob `%s;` in global: list each symbol by name" % (
                    map_path, n, entry))
            elif not NAME.fullmatch(entry):
                problems.append("%s:%d: not a symbol name: %s" % (map_path, n, entry))
            elif entry in names:
                problems.append("%s:%d: %s listed twice" % (map_path, n, entry))
            else:
                names[entry] = (node, n)
    if not nodes:
        problems.append("%s: no version node" % map_path)
    return nodes, names, problems


def exported(lib):
    """{name: version} of the symbols the library defines in its dynamic table."""
    nm = os.environ.get("NM", "nm")
    out = subprocess.run([nm, "-D", "--defined-only", lib], check=True,
                         stdout=subprocess.PIPE, universal_newlines=True).stdout
    syms = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 3 or parts[1] not in EXPORT_TYPES:
            continue  # 'A': a version node's own symbol
        name, _, version = parts[2].partition("@")
        syms[name] = version.lstrip("@")
    return syms


def neighbour(name, listed):
    """Where `name` goes in the sorted list: after which listed name."""
    before = [s for s in sorted(listed) if s < name]
    return ("after the line `    %s;`" % before[-1]) if before else "as the first line of global:"


NODE = re.compile(r"DETSHARE_(\d+)\.(\d+)")


def node_order(nodes, version):
    """Problems with the nodes' names and order, and with the newest one
    against the project's version (None: not checked)."""
    problems, keys = [], []
    for node in nodes:
        m = NODE.fullmatch(node)
        if not m:
            problems.append("version node %s: name it DETSHARE_<major>.<minor>" % node)
            continue
        keys.append((int(m.group(1)), int(m.group(2))))
    if keys != sorted(set(keys)):
        problems.append("version nodes %s: list them oldest first, each once" % ", ".join(nodes))
    if version and keys:
        want = "DETSHARE_%s.%s" % tuple(version.split(".")[:2])
        if nodes[-1] != want:
            problems.append("the newest version node is %s but the project's version is %s: what this "
                            "version adds goes in a node %s { global: ...; } %s;" % (
                                nodes[-1], version, want, nodes[-1]))
    return problems


def check(lib, map_path, include_dir, version=None):
    api = header_api(include_dir)
    nodes, listed, problems = map_symbols(map_path)
    problems += node_order(nodes, version)
    syms = exported(lib)
    mapname = shown(map_path, include_dir)
    last = nodes[-1] if nodes else "DETSHARE_0.1"

    for name in sorted(set(api) - set(listed)):
        problems.append(
            "%s is declared DS_API (%s) but %s does not list it: add the line `    %s;` "
            "to node %s's global: list, %s" % (name, api[name], mapname, name, last,
                                              neighbour(name, listed)))
    for name in sorted(set(syms) - set(listed) - set(api)):  # (DS_API ones: above)
        problems.append("the library exports %s, which %s does not list and no header "
                        "declares DS_API: make it static, or internal (ds__ prefix, no "
                        "DS_API)" % (name, mapname))
    for name in sorted(set(listed) - set(syms)):
        node, n = listed[name]
        why = ("declared DS_API at %s but not defined in the library: define it, or "
               "remove the line `    %s;` (%s:%d) and its declaration" % (api[name], name, mapname, n)
               if name in api else
               "no header declares it and the library does not define it: remove the line "
               "`    %s;` (%s:%d)" % (name, mapname, n))
        problems.append("%s lists %s, which the library does not export: %s" % (mapname, name, why))
    for name in sorted(set(listed) & set(syms) - set(api)):
        node, n = listed[name]
        problems.append("%s:%d lists %s, which no header in %s declares DS_API: declare it "
                        "or remove the line" % (mapname, n, name, include_dir))
    for name in sorted(set(listed) & set(syms)):
        node = listed[name][0]
        if syms[name] != node:
            problems.append("the library exports %s with version %r, the map puts it in %s "
                            "(relink: the map is a link dependency)" % (name, syms[name], node))
    return problems, len(api), len(listed), len(syms)


def main(argv):
    if len(argv) not in (4, 5):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    problems, n_api, n_map, n_lib = check(argv[1], argv[2], argv[3], argv[4] if len(argv) == 5 else None)
    for p in problems:
        print("check-symbols: " + p)
    if problems:
        print("check-symbols: %d problem(s) (headers declare %d, the map lists %d, the library "
              "exports %d)" % (len(problems), n_api, n_map, n_lib), file=sys.stderr)
        return 1
    print("check-symbols: ok: %d DS_API functions, listed and exported" % n_api)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
