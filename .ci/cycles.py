#!/usr/bin/env python3
"""Fails when the top-level modules of a crate's source folder import each other in a cycle.

A module's imports are the `crate::<module>` paths of its files, outside comments and its tests.
Usage: cycles.py SRC_DIR [SRC_DIR ...]
"""
import os
import re
import sys


def imports(src):
    skip = {"lib.rs", "main.rs"}
    mods = sorted(os.path.splitext(m)[0] for m in os.listdir(src) if m not in skip and m != "cli")
    deps = {m: set() for m in mods}
    for m in mods:
        files = [os.path.join(src, m + ".rs")] if os.path.isfile(os.path.join(src, m + ".rs")) else []
        for folder, _, names in os.walk(os.path.join(src, m)):
            files += [os.path.join(folder, n) for n in names if n.endswith(".rs")]
        for f in files:
            if os.sep + "tests" + os.sep in f or f.endswith("tests.rs"):
                continue
            text = re.split(r"#\[cfg\(test\)\]\s*(?:pub )?mod tests", open(f).read())[0]
            text = "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("//"))
            for d in re.findall(r"crate::([a-z_]+)", text):
                if d != m and d in deps:
                    deps[m].add(d)
    return deps


def cycles(deps):
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(deps[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in deps:
        if v not in index:
            visit(v)
    return found


bad = False
for src in sys.argv[1:]:
    for part in cycles(imports(src)):
        print(f"!! {src}: modules import each other in a cycle: {' ↔ '.join(part)}", file=sys.stderr)
        bad = True
sys.exit(1 if bad else 0)
