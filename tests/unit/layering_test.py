#!/usr/bin/env python3
"""The layering of proxy/ is a test: docs/architecture.md's "Layers" table says which
library may use which, and this fails on any #include of another library's header, or
any link to another library's target, that the table does not allow.

Usage: layering_test.py SOURCE_DIR            (ctest: layering_test)
       layering_test.py SOURCE_DIR --print    (the table as read, then the check)
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"proxy/([a-z0-9_]+)/([^"]+)"')
ROW = re.compile(r'^\|\s*(`[a-z0-9_]+`(?:\s*,\s*`[a-z0-9_]+`)*)\s*\|\s*([^|]*)\|')
ADD_LIBRARY = re.compile(r'add_(?:library|executable)\(\s*([A-Za-z0-9_-]+)')
LINK = re.compile(r'target_link_libraries\(\s*([A-Za-z0-9_-]+)([^)]*)\)', re.S)


def read_table(doc):
    """{library: set of libraries it may use}, from the table under "## Layers"."""
    text = open(doc, encoding="utf-8").read()
    start = text.find("\n## Layers")
    if start < 0:
        sys.exit(f"{doc}: no '## Layers' section")
    end = text.find("\n## ", start + 1)
    allowed = {}
    for line in text[start:end].splitlines():
        m = ROW.match(line)
        if not m:
            continue
        names = re.findall(r"`([a-z0-9_]+)`", m.group(1))
        uses = m.group(2).strip()
        may = set() if uses in ("–", "-", "") else {u.strip() for u in uses.split(",")}
        for name in names:
            if name in allowed:
                sys.exit(f"{doc}: '{name}' has two rows in the Layers table")
            allowed[name] = may
    if not allowed:
        sys.exit(f"{doc}: the Layers table has no rows")
    return allowed


def targets_by_folder(proxy):
    """{cmake target: library folder} for every target defined under proxy/<folder>/."""
    owner = {}
    for lib in os.listdir(proxy):
        cml = os.path.join(proxy, lib, "CMakeLists.txt")
        if os.path.isfile(cml):
            for target in ADD_LIBRARY.findall(open(cml, encoding="utf-8").read()):
                owner[target] = lib
    return owner


def check(source_dir):
    proxy = os.path.join(source_dir, "proxy")
    allowed = read_table(os.path.join(source_dir, "docs", "architecture.md"))
    libs = sorted(d for d in os.listdir(proxy) if os.path.isdir(os.path.join(proxy, d)))
    errors = []
    for lib in libs:
        if lib not in allowed:
            errors.append(f"proxy/{lib}/: a library without a row in docs/architecture.md's Layers table")
    for name, may in allowed.items():
        for used in may - set(libs):
            errors.append(f"docs/architecture.md: '{name}' may use '{used}', which is no library of proxy/")
    for lib in libs:
        may = allowed.get(lib, set())
        for folder, _, files in os.walk(os.path.join(proxy, lib)):
            for f in sorted(files):
                if not f.endswith((".h", ".cc")):
                    continue
                path = os.path.join(folder, f)
                with open(path, encoding="utf-8", errors="replace") as src:
                    for number, line in enumerate(src, 1):
                        m = INCLUDE.match(line)
                        if m and m.group(1) != lib and m.group(1) not in may:
                            rel = os.path.relpath(path, source_dir)
                            errors.append(f"{rel}:{number}: {lib} includes proxy/{m.group(1)}/{m.group(2)}, "
                                          f"but {lib} may use only: {', '.join(sorted(may)) or 'nothing'}")
    owner = targets_by_folder(proxy)
    for lib in libs:
        cml = os.path.join(proxy, lib, "CMakeLists.txt")
        if not os.path.isfile(cml):
            continue
        may = allowed.get(lib, set())
        for target, args in LINK.findall(open(cml, encoding="utf-8").read()):
            for dep in args.split():
                used = owner.get(dep)
                if used and used != lib and used not in may:
                    errors.append(f"proxy/{lib}/CMakeLists.txt: {target} links {dep} ({used}), "
                                  f"but {lib} may use only: {', '.join(sorted(may)) or 'nothing'}")
    return allowed, errors


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    allowed, errors = check(sys.argv[1])
    if "--print" in sys.argv:
        for name, may in allowed.items():
            print(f"{name}: {', '.join(sorted(may)) or '-'}")
    for e in errors:
        print(e)
    if errors:
        print(f"layering: {len(errors)} uses the table does not allow (docs/architecture.md, \"Layers\")")
        return 1
    print(f"layering: {len(allowed)} libraries, every include and link allowed by docs/architecture.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
