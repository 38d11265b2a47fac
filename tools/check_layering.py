#!/usr/bin/env python3
"""The direction between forge's folders, checked against every #include.

The allowed direction is one table in docs/architecture.md (between the
markers `<!-- layering table -->` and `<!-- end layering table -->`): a row
per folder of src/ (and `apps` for apps/), naming the folders it may include
besides itself. This program reads that table and every `#include "..."` of
src/ and apps/ (and every `#include <...>` that names a file of src/, which
the include path would find as well), and fails (exit 1, one line per
offence) when

  - a file includes a folder its row does not list,
  - a file of src/ or apps/ includes something that is not a file of src/
    (tests/, bench/, a path that does not exist), except a header of its own
    folder,
  - an include path has a `..` component (it would hide the folder it
    reaches),
  - a folder has no row, or a row names a folder that does not exist,
  - the table itself has a cycle (the direction must be one way).

Folders are the first path component under src/, except backend/cpu and
backend/cuda, which are rows of their own: outside the backend wing only the
interface (src/backend/*.hpp) may be included.

  tools/check_layering.py [--root DIR]     (DIR: a checkout; default: this one)
"""
import argparse
import os
import re
import sys

SOURCE_SUFFIXES = (".hpp", ".cpp", ".cu", ".cuh", ".h")
INCLUDE = re.compile(r'^\s*#\s*include\s+(?:"([^"]+)"|<([^>]+)>)', re.M)
SUBFOLDER_ROWS = ("backend/cpu", "backend/cuda")


def folder_of_source(rel):
    """The row of a file given relative to the root (src/... or apps/...)."""
    parts = rel.split("/")
    if parts[0] == "apps":
        return "apps"
    inner = "/".join(parts[1:-1])
    for sub in SUBFOLDER_ROWS:
        if inner == sub or inner.startswith(sub + "/"):
            return sub
    return parts[1]


def folder_of_include(path):
    """The row an include path like "model/policy_model.hpp" lands in."""
    for sub in SUBFOLDER_ROWS:
        if path.startswith(sub + "/"):
            return sub
    return path.split("/")[0]


def read_table(doc):
    text = open(doc, encoding="utf-8").read()
    m = re.search(r"<!-- layering table -->(.*?)<!-- end layering table -->", text, re.S)
    if not m:
        sys.exit(f"{doc}: no layering table (markers <!-- layering table --> ... <!-- end layering table -->)")
    table = {}
    for line in m.group(1).splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0] or cells[0].startswith("-") or cells[0] == "folder":
            continue
        allowed = {a.strip().strip("`") for a in cells[1].split(",") if a.strip() not in ("", "-", "—")}
        table[cells[0]] = allowed
    return table


def find_cycle(table):
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(table.get(node, ())):
            if state.get(nxt) == "open":
                return path + [node, nxt]
            if nxt not in state:
                found = visit(nxt, path + [node])
                if found:
                    return found
        state[node] = "done"
        return None

    for node in sorted(table):
        if node not in state:
            found = visit(node, [])
            if found:
                return found[found.index(found[-1]):]
    return None


def check(root):
    doc = os.path.join(root, "docs", "architecture.md")
    table = read_table(doc)
    problems = []
    cycle = find_cycle(table)
    if cycle:
        problems.append("docs/architecture.md: the layering table has a cycle: " + " -> ".join(cycle))

    src = os.path.join(root, "src")
    existing = {"apps"} if os.path.isdir(os.path.join(root, "apps")) else set()
    for entry in sorted(os.listdir(src)):
        if os.path.isdir(os.path.join(src, entry)):
            existing.add(entry)
    existing.update(s for s in SUBFOLDER_ROWS if os.path.isdir(os.path.join(src, s)))
    for folder in sorted(existing - set(table)):
        problems.append(f"docs/architecture.md: folder '{folder}' has no row in the layering table")
    for folder, allowed in sorted(table.items()):
        for name in sorted(({folder} | allowed) - existing):
            problems.append(f"docs/architecture.md: the row of '{folder}' names '{name}', which is no folder")

    files = 0
    for top in ("src", "apps"):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                here = folder_of_source(rel)
                files += 1
                text = open(path, encoding="utf-8", errors="replace").read()
                for m in INCLUDE.finditer(text):
                    quoted, inc = m.group(1) is not None, m.group(1) or m.group(2)
                    line = text.count("\n", 0, m.start()) + 1
                    where = f"{rel}:{line}"
                    shown = f'"{inc}"' if quoted else f"<{inc}>"
                    if ".." in inc.split("/"):
                        problems.append(f'{where}: #include {shown} has a ".." component (name the folder)')
                        continue
                    if not quoted and not os.path.isfile(os.path.join(src, inc)):
                        continue  # a system or library header
                    if os.path.isfile(os.path.join(dirpath, inc)) and "/" not in inc:
                        continue  # a header of the file's own folder
                    if not os.path.isfile(os.path.join(src, inc)):
                        problems.append(f"{where}: #include {shown} is not a file of src/")
                        continue
                    there = folder_of_include(inc)
                    if there != here and there not in table.get(here, set()):
                        problems.append(f"{where}: #include {shown}: {here} may not include {there} "
                                        f"(docs/architecture.md, layering table)")
    return files, problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    args = ap.parse_args()
    if not os.path.isfile(os.path.join(args.root, "docs", "architecture.md")):
        print(f"check_layering: --root {args.root}: not a forge checkout (no docs/architecture.md)", file=sys.stderr)
        return 2
    files, problems = check(os.path.abspath(args.root))
    for p in problems:
        print(p)
    if problems:
        print(f"layering: {len(problems)} problem(s) in {files} files")
        return 1
    print(f"layering: {files} files of src/ and apps/ follow docs/architecture.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
