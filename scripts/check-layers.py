#!/usr/bin/env python3
"""Fails when a module imports against the direction of the layers (docs/architecture.md):

    model  <-  domain (src/server/* but the edge and top modules)  <-  edges (src/server/http,
    src/server/state.rs, the tools src/server/bench and src/server/doctor, src/api, src/app,
    src/client)  <-  top (src/server/serve.rs, cli.rs, config.rs, commands/, main, lib)

and: only `src/server/http/` and the top import `crate::server::http`; `src/server/config.rs` is a
leaf that imports nothing of the crate, and only the top imports it.

Inside the domain, each module (`src/server/<name>`) stands on a floor (FLOORS below). A module
imports only modules on its own floor or below, and the modules of one floor never import each
other in a loop (a cycle among the domain's modules is reported whatever the floors).

`--self-test` plants a back-import in a copy of the tree and checks that it is caught.

Every path the code names is checked, not only `use` lines: `crate::…`, `super::…` (resolved
against the file's own module) and brace groups such as `crate::server::{db, http::ApiError}`.
Prints each violation as `file:line: what` and exits 1 when there is any.
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"

MODEL, DOMAIN, EDGE, TOP = 0, 1, 2, 3
NAMES = {MODEL: "model", DOMAIN: "domain", EDGE: "edge", TOP: "top"}

# The floors of the domain, lowest first (docs/architecture.md, "Floors of the domain").
FLOORS = [
    # storage, the container runtime and the process's plumbing
    ["error", "db", "runtime", "notifier", "periodic", "metrics"],
    # what the domain knows about: cards, people, the manifest, nodes and their peers
    ["gpu", "auth", "manifest", "nodes", "peers", "registries", "budgets", "fairness", "sessions"],
    # what runs by itself: admission passes, the runner, VRAM policing, usage, the firewall
    ["admission", "runner", "vram", "idle", "usage", "firewall"],
    # the context the services share, and the bounds it holds
    ["limits", "context"],
    # the services the edges call
    ["jobs", "admin", "cards", "notify"],
    # one node's tasks, assembled by one function
    ["node"],
]
FLOOR = {name: i for i, names in enumerate(FLOORS) for name in names}
# Names re-exported at `crate::server::…` and the module they come from.
REEXPORTS = {"Ctx": "context", "AppState": "state"}
EDGE_TOOLS = ("state", "bench", "doctor")
TOP_MODULES = ("serve", "cli", "config", "commands")


def module_of(path: Path, src: Path = SRC) -> list[str]:
    """The module path of a source file, e.g. src/server/db/mod.rs -> [server, db]."""
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return parts


def layer_of(module: list[str]) -> int:
    """The layer of a module (a file or a path it names)."""
    if not module:
        return TOP
    head = module[0]
    if head == "model":
        return MODEL
    if head in ("api", "app", "client"):
        return EDGE
    if head == "server":
        if len(module) == 1:
            return TOP
        second = REEXPORTS.get(module[1], module[1])
        if second == "http" or second in EDGE_TOOLS:
            return EDGE
        if second in TOP_MODULES:
            return TOP  # config: importable by the top only; checked separately as a leaf
        return DOMAIN
    return TOP


def strip_comments(text: str) -> str:
    """Blanks out comments and string literals, keeping line numbers."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j == -1 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j == -1 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == '"' or (c == "r" and re.match(r'r#*"', text[i:])):
            m = re.match(r'r(#*)"', text[i:])
            if m:
                end = '"' + m.group(1)
                j = text.find(end, i + len(m.group(0)))
                j = n if j == -1 else j + len(end)
            else:
                j = i + 1
                while j < n and text[j] != '"':
                    j += 2 if text[j] == "\\" else 1
                j += 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:]):
            m = re.match(r"'(\\.|[^\\'])'", text[i:])
            out.append("' '")
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand(prefix: list[str], tree: str) -> list[list[str]]:
    """Expands a brace group `a, b::c, d::{e, f}` under `prefix` into full paths."""
    items, depth, cur = [], 0, ""
    for ch in tree:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    paths = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        if "{" in item:
            head, rest = item.split("{", 1)
            head = [p for p in head.strip().rstrip(":").split("::") if p]
            paths.extend(expand(prefix + head, rest.rsplit("}", 1)[0]))
        else:
            name = item.split(" as ")[0].strip()
            paths.append(prefix + [p for p in name.split("::") if p and p != "self"])
    return paths


PATH_RE = re.compile(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)*)(::\{)?")


def named_paths(text: str, here: list[str]):
    """Yields (line, absolute module path) for every crate-relative path in the text."""
    for m in PATH_RE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        segs = [s for s in m.group(2).split("::") if s]
        if m.group(1) == "crate":
            base = []
        else:
            base = here[:-1]
            while segs and segs[0] == "super":
                base = base[:-1]
                segs = segs[1:]
        prefix = base + segs
        if m.group(3):
            depth, j = 1, m.end()
            while j < len(text) and depth:
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                j += 1
            for p in expand(prefix, text[m.end() : j - 1]):
                yield line, p
        else:
            yield line, prefix


def domain_module(module: list[str]) -> str | None:
    """The domain module (`src/server/<name>`) a path belongs to, if it is in the domain."""
    if layer_of(module) != DOMAIN or len(module) < 2 or module[0] != "server":
        return None
    return REEXPORTS.get(module[1], module[1])


def loops(edges: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other in a loop (strongly connected components of
    more than one module), each sorted, in a stable order (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def check(src: Path, root: Path) -> list[str]:
    bad = []
    witness: dict[tuple[str, str], str] = {}
    unplaced: set = set()
    for path in sorted(src.rglob("*.rs")):
        here = module_of(path, src)
        # A file's own module: `super::` in a non-mod file refers to its parent module.
        if path.stem not in ("mod", "lib", "main"):
            scope = here
        else:
            scope = here + ["_"]
        mine = layer_of(here)
        rel = path.relative_to(root)
        text = strip_comments(path.read_text())
        for line, target in named_paths(text, scope):
            # An ancestor of this file (`use super::*` in an inline test module): its own parent.
            if not target or here[: len(target)] == target:
                continue
            to = layer_of(target)
            is_http = target[:2] == ["server", "http"]
            is_config = target[:2] == ["server", "config"]
            inside = lambda prefix: here[: len(prefix)] == prefix  # noqa: E731
            if here == ["server", "config"] and target[:2] != ["server", "config"]:
                bad.append(f"{rel}:{line}: config.rs is a leaf, but names crate::{'::'.join(target)}")
            elif is_http and not (inside(["server", "http"]) or mine == TOP):
                bad.append(f"{rel}:{line}: only src/server/http/ and the top may use the HTTP module "
                           f"(names crate::{'::'.join(target)})")
            elif is_config and mine != TOP and not inside(["server", "config"]):
                bad.append(f"{rel}:{line}: only the top reads the flags (names crate::{'::'.join(target)})")
            elif to > mine:
                bad.append(f"{rel}:{line}: {NAMES[mine]} module imports the {NAMES[to]} layer "
                           f"(crate::{'::'.join(target)})")
            else:
                a, b = domain_module(here), domain_module(target)
                if a is None or b is None or a == b:
                    continue
                for name in (a, b):
                    if name not in FLOOR and (rel, name) not in unplaced:
                        unplaced.add((rel, name))
                        bad.append(f"{rel}:{line}: domain module `{name}` stands on no floor: add it "
                                   f"to FLOORS in scripts/check-layers.py and to docs/architecture.md")
                if a in FLOOR and b in FLOOR and FLOOR[b] > FLOOR[a]:
                    bad.append(f"{rel}:{line}: `{a}` (floor {FLOOR[a]}) imports `{b}`, a floor above "
                               f"it (floor {FLOOR[b]}): crate::{'::'.join(target)}")
                witness.setdefault((a, b), f"{rel}:{line}")
    edges: dict[str, set[str]] = {}
    for a, b in witness:
        edges.setdefault(a, set()).add(b)
    for group in loops(edges):
        steps = ", ".join(f"{x} -> {y} ({w})" for (x, y), w in sorted(witness.items())
                          if x in group and y in group)
        bad.append(f"domain modules import each other in a loop: {', '.join(group)}: {steps}")
    return bad


def self_test() -> int:
    """Plants a back-import (db -> jobs) and a loop on one floor in a copy of src/: both caught."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copytree(SRC, root / "src")
        before = set(check(root / "src", root))
        db = root / "src/server/db/mod.rs"
        db.write_text(db.read_text() + "\nuse crate::server::jobs::JobAck;\n")
        caught = set(check(root / "src", root)) - before
        if not any("`db` (floor 0) imports `jobs`" in b for b in caught):
            print("self-test: a planted back-import db -> jobs was not caught:", caught)
            return 1
        shutil.rmtree(root / "src")
        shutil.copytree(SRC, root / "src")
        for a, b in (("runtime", "notifier"), ("notifier", "runtime")):
            f = root / f"src/server/{a}/mod.rs" if (root / f"src/server/{a}").is_dir() \
                else root / f"src/server/{a}.rs"
            f.write_text(f.read_text() + f"\nuse crate::server::{b}::*;\n")
        caught = set(check(root / "src", root)) - before
        if not any("in a loop" in b and "runtime" in b for b in caught):
            print("self-test: a planted loop runtime <-> notifier was not caught:", caught)
            return 1
    print("self-test: a planted back-import and a planted loop are both caught")
    return 0


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    bad = check(SRC, ROOT)
    for b in bad:
        print(b)
    if bad:
        print(f"{len(bad)} import(s) against the direction of the layers (see docs/architecture.md)")
        return 1
    print("layers: every import goes the right way")
    return 0


if __name__ == "__main__":
    sys.exit(main())
