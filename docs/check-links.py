#!/usr/bin/env python3
"""Check the relative links and #anchors of README.md and the book (docs/src/**/*.md).

Every link that is not to another site (http:, https:, mailto:) must name a file that exists,
relative to the page it is on, and an #anchor must name a heading of its target page, with ids
made the way mdBook and GitHub make them (lowercase; letters, digits, '-' and '_' kept; spaces
to '-'; a repeated heading gets -1, -2, ...). Exits 1 and lists every broken link, else 0.

    python3 docs/check-links.py            # from anywhere in the repository
    python3 docs/check-links.py FILE.md... # only these pages
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.M)
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


def prose(text):
    """The text without fenced code blocks and code spans (links there are not links)."""
    out, fenced = [], None
    for line in text.splitlines():
        stripped = line.lstrip()
        if fenced:
            if stripped.startswith(fenced):
                fenced = None
            out.append("")
            continue
        m = re.match(r"(```+|~~~+)", stripped)
        if m:
            fenced = m.group(1)
            out.append("")
            continue
        out.append(line)
    return CODE_SPAN.sub(lambda m: "x" * len(m.group(2)), "\n".join(out))


def heading_ids(text):
    ids, seen, fenced = set(), {}, None
    for line in text.splitlines():
        stripped = line.lstrip()
        m = re.match(r"(```+|~~~+)", stripped)
        if fenced:
            if stripped.startswith(fenced):
                fenced = None
            continue
        if m:
            fenced = m.group(1)
            continue
        h = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not h:
            continue
        title = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", h.group(1))  # links keep their text
        title = re.sub(r"<[^>]+>", "", title).replace("`", "")
        base = "".join(
            c if c.isalnum() or c in "-_" else "-" if c.isspace() else ""
            for c in title.strip().lower()
        )
        n = seen.get(base, 0)
        seen[base] = n + 1
        ids.add(base if n == 0 else f"{base}-{n}")
    return ids


def pages(args):
    if args:
        return [Path(a).resolve() for a in args]
    return [ROOT / "README.md"] + sorted((ROOT / "docs" / "src").rglob("*.md"))


def check(page, cache):
    problems = []
    text = page.read_text(encoding="utf-8")
    body = prose(text)
    targets = [(m.group(1), body.count("\n", 0, m.start()) + 1) for m in LINK.finditer(body)]
    targets += [(m.group(1), body.count("\n", 0, m.start()) + 1) for m in REFERENCE.finditer(body)]
    for target, line in targets:
        if EXTERNAL.match(target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(ROOT)}:{line}: {target}"
        if not dest.exists():
            problems.append(f"{where}: no such file ({dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest})")
            continue
        if anchor:
            if dest.suffix != ".md":
                problems.append(f"{where}: an anchor into a file that is not a page")
                continue
            if dest not in cache:
                cache[dest] = heading_ids(dest.read_text(encoding="utf-8"))
            if anchor not in cache[dest]:
                problems.append(f"{where}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    return problems


def main(args):
    cache, problems, count = {}, [], 0
    for page in pages(args):
        count += 1
        problems += check(page, cache)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} broken link(s) in {count} page(s)", file=sys.stderr)
        return 1
    print(f"links ok in {count} page(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
