#!/usr/bin/env python3
"""Fails when a module imports against the direction of the layers (docs/architecture.md):

    model  <-  domain (src/server/* but http, serve, cli, config)  <-  edges (src/server/http,
    src/api, src/app, src/client)  <-  top (src/server/serve.rs, src/server/cli.rs, main, lib)

and: only `src/server/http/` and the top import `crate::server::http`; `src/server/config.rs` is a
leaf that imports nothing of the crate, and only the top imports it.

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


def module_of(path: Path) -> list[str]:
    """The module path of a source file, e.g. src/server/db/mod.rs -> [server, db]."""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
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
        second = module[1]
        if second == "http":
            return EDGE
        if second in ("serve", "cli"):
            return TOP
        if second == "config":
            return TOP  # importable by the top only; checked separately as a leaf
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


def main() -> int:
    bad = []
    for path in sorted(SRC.rglob("*.rs")):
        here = module_of(path)
        # A file's own module: `super::` in a non-mod file refers to its parent module.
        if path.stem not in ("mod", "lib", "main"):
            scope = here
        else:
            scope = here + ["_"]
        mine = layer_of(here)
        rel = path.relative_to(ROOT)
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
    for b in bad:
        print(b)
    if bad:
        print(f"{len(bad)} import(s) against the direction of the layers (see docs/architecture.md)")
        return 1
    print("layers: every import goes the right way")
    return 0


if __name__ == "__main__":
    sys.exit(main())
