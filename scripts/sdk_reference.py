#!/usr/bin/env python3
"""The SDKs' API reference (docs/SDK-REFERENCE.md) and the check that the three SDKs are at parity.

plugin-sdk/parity.json lists every helper the SDKs offer, one row per helper with its name in
Rust, Python and JavaScript (or "-" and why a language has none). This script reads what each
SDK defines from its sources (Rust `pub` items and their `///` docs; Python's public names and
docstrings, with `ast`; JavaScript's exports and their `/** */` docs) and:

  scripts/sdk_reference.py          writes docs/SDK-REFERENCE.md from the table and the docs
  scripts/sdk_reference.py --check  fails, naming what differs, when a row names something an
                                    SDK does not define, when an SDK defines a public helper no
                                    row names, when a helper has no doc, or when the page is
                                    not what this script writes (host/tests/languages.rs runs it)
"""

import ast
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SDK = os.path.join(ROOT, "plugin-sdk")
PAGE = os.path.join(ROOT, "docs", "SDK-REFERENCE.md")
LANGUAGES = ("rust", "python", "javascript")


def read(*parts):
    with open(os.path.join(*parts), encoding="utf-8") as f:
        return f.read()


def first_paragraph(text):
    text = (text or "").strip()
    return " ".join(text.split("\n\n")[0].split())


def rust_items():
    """Public functions and constants of the Rust SDK by path (`Gvk::pod`, `cache::list`), with
    their first doc paragraph. Items of test modules and of the generated bindings are left
    out; so are trait implementations (`impl From<..> for ..`)."""
    items = {}
    for name in sorted(os.listdir(os.path.join(SDK, "src"))):
        if not name.endswith(".rs"):
            continue
        module = "" if name in ("lib.rs", "guest.rs") else name[:-3]
        lines = read(SDK, "src", name).splitlines()
        scopes = []  # (indent, name or None for a scope that is not public API)
        doc = []
        for line in lines:
            stripped = line.strip()
            indent = len(line) - len(line.lstrip())
            if stripped.startswith("///"):
                doc.append(stripped[3:].strip())
                continue
            if stripped.startswith("#["):
                if stripped.startswith("#[cfg(test)]"):
                    doc = ["#test"]
                continue
            while scopes and scopes[-1][0] >= indent and stripped and not stripped.startswith("}"):
                scopes.pop()
            if stripped.startswith("}") and scopes and scopes[-1][0] == indent:
                scopes.pop()
                doc = []
                continue
            opened = stripped.endswith("{")
            m = re.match(r"(pub )?mod (\w+)", stripped)
            if m and opened:
                hidden = doc[:1] == ["#test"] or not m.group(1) or m.group(2) == "bindings"
                scopes.append((indent, None if hidden else m.group(2)))
                doc = []
                continue
            m = re.match(r"impl(?:<[^>]*>)? ([\w:]+)(?:<[^>]*>)? \{$", stripped)
            if m:
                scopes.append((indent, m.group(1).split("::")[-1]))
                doc = []
                continue
            if re.match(r"impl\b", stripped) and opened:
                scopes.append((indent, None))  # a trait implementation
                doc = []
                continue
            m = re.match(r"pub trait (\w+)", stripped)
            if m and opened:
                scopes.append((indent, m.group(1)))
            m = re.match(r"pub (?:const )?(?:fn|const|struct|enum|trait) (\w+)", stripped)
            if m and all(s[1] is not None for s in scopes):
                path = [s[1] for s in scopes if s[1] and s[1] != m.group(1)]
                if module and (not path or path[0] != module):
                    path.insert(0, module)
                items["::".join(path + [m.group(1)])] = first_paragraph("\n".join(doc))
            if not stripped.startswith("//"):
                doc = []
    return items


def python_items():
    """Public names of the Python SDK (`__all__`, and the public members of the classes and
    objects it exports: `state.get`, `Selector.matches`), with their docstrings."""
    items = {}
    for module in ("__init__.py", "selector.py"):
        tree = ast.parse(read(SDK, "python", "kubewasm_sdk", module))
        classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        exported = None
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                exported = set(ast.literal_eval(node.value))

        def members(prefix, cls):
            body = cls.body
            for i, node in enumerate(body):
                if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                    items[f"{prefix}.{node.name}"] = first_paragraph(ast.get_docstring(node))
                elif isinstance(node, ast.Assign):
                    for t in node.targets:
                        if isinstance(t, ast.Name) and not t.id.startswith("_"):
                            nxt = body[i + 1] if i + 1 < len(body) else None
                            text = (nxt.value.value if isinstance(nxt, ast.Expr)
                                    and isinstance(nxt.value, ast.Constant) else "")
                            items[f"{prefix}.{t.id}"] = first_paragraph(text)

        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                if node.name.startswith("_") or (exported is not None and node.name not in exported):
                    continue
                items[node.name] = first_paragraph(ast.get_docstring(node))
                if isinstance(node, ast.ClassDef):
                    members(node.name, node)
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    if not isinstance(t, ast.Name) or t.id.startswith("_") or t.id == "__all__":
                        continue
                    if exported is not None and t.id not in exported:
                        continue
                    value = node.value
                    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in classes:
                        cls = classes[value.func.id]
                        items[t.id] = first_paragraph(ast.get_docstring(cls))
                        members(t.id, cls)
                    else:
                        items[t.id] = ""
    return items


def javascript_items():
    """Exports of the JavaScript SDK, with the members of exported objects and classes
    (`state.get`, `Selector.matches`), and their `/** */` docs."""
    items = {}
    for module in ("index.js", "selector.js"):
        text = read(SDK, "javascript", module)
        lines = text.splitlines()
        doc, in_doc, container, depth = [], False, None, 0
        for line in lines:
            s = line.strip()
            if s.startswith("/**"):
                in_doc = not s.endswith("*/")
                doc = [s[3:].rstrip("*/").strip()]
                continue
            if in_doc:
                in_doc = not s.endswith("*/")
                doc.append(s.lstrip("*").rstrip("*/").strip())
                continue
            m = re.match(r"export (?:function|class|const) (\w+)", s)
            if m:
                items[m.group(1)] = first_paragraph("\n".join(doc))
                doc = []
                opens = s.count("{") - s.count("}")
                if (s.startswith("export class") or "Object.freeze({" in s) and opens > 0:
                    container, depth = m.group(1), opens
                continue
            if container:
                m = re.match(r"(?:static )?(\w+)(?:: |\()", s)
                if m and depth == 1 and m.group(1) not in ("constructor", "return", "if", "for"):
                    items[f"{container}.{m.group(1)}"] = first_paragraph("\n".join(doc))
                depth += s.count("{") - s.count("}")
                if depth <= 0:
                    container = None
            if not s.startswith("//"):
                doc = []
            m = re.match(r"export \{ (\w+) \} from", s)
            if m:
                items.setdefault(m.group(1), "")
    return items


def python_parameters():
    """Parameter names of the Python SDK's functions, by function name."""
    out = {}
    for module in ("__init__.py", "selector.py"):
        for node in ast.walk(ast.parse(read(SDK, "python", "kubewasm_sdk", module))):
            if isinstance(node, ast.FunctionDef):
                a = node.args
                names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
                names += [x.arg for x in (a.vararg, a.kwarg) if x]
                out.setdefault(node.name, set()).update(names)
    return out


def javascript_parameters():
    """Parameter names of the JavaScript SDK's exported functions (destructured options
    included), by function name."""
    out = {}
    for module in ("index.js", "selector.js"):
        text = read(SDK, "javascript", module)
        for m in re.finditer(r"export function (\w+)\((.*?)\)\s*\{\n", text, re.S):
            out[m.group(1)] = set(re.findall(r"(?:\.\.\.)?\b([A-Za-z_]\w*)\b(?=\s*(?:=|,|\}|$))", m.group(2)))
    return out


def check(table, found, parameters):
    """Everything wrong with the table against the SDKs' sources, as lines."""
    problems = []
    named = {language: set() for language in LANGUAGES}
    for area in table["areas"]:
        for row in area["rows"]:
            what, entries = row[0], dict(zip(LANGUAGES, row[1:]))
            if len(row) != 4:
                problems.append(f"row {what!r}: needs a name in each of {', '.join(LANGUAGES)}")
                continue
            for language, entry in entries.items():
                if entry.startswith("-"):
                    if len(entry.strip("- ")) < 3:
                        problems.append(f"row {what!r}: {language} has none and says not why")
                    continue
                m = re.fullmatch(r"([\w:.]+)(?:\((\w+)\))?", entry)
                if not m:
                    problems.append(f"row {what!r}: {language} entry {entry!r} is not a name")
                    continue
                name, parameter = m.groups()
                named[language].add(name)
                if name not in found[language]:
                    problems.append(
                        f"row {what!r}: the {language} SDK defines no {name} "
                        f"(what the other SDKs offer here: {entries})"
                    )
                elif parameter and parameter not in parameters.get(language, {}).get(name, set()):
                    problems.append(f"row {what!r}: {language}'s {name} takes no {parameter}")
    for language in LANGUAGES:
        for name in sorted(set(found[language]) - named[language]):
            problems.append(
                f"the {language} SDK's {name} is in no row of plugin-sdk/parity.json: add it, "
                "with what the other SDKs offer for it"
            )
        for name in sorted(named[language]):
            if name in found[language] and not found[language][name] and not name.split(".")[-1].isupper():
                problems.append(f"the {language} SDK's {name} has no doc comment")
    return problems


def cell(entry):
    if entry.startswith("-"):
        return "— " + entry.lstrip("- ").replace("|", "\\|")
    name, _, parameter = entry.partition("(")
    if parameter:
        # A parameter's spelling differs (keyword, options object, rest argument): name it.
        return f"`{name}`, its `{parameter.rstrip(')')}`"
    return f"`{name}`"


def page(table, found):
    out = [
        "# SDK reference",
        "",
        "Written by `scripts/sdk_reference.py` from `plugin-sdk/parity.json` and the SDKs' own "
        "doc comments (Rust `///`, Python docstrings, JavaScript `/** */`); do not edit by hand. "
        "A test (`host/tests/languages.rs`) fails when an SDK lacks a helper another has and the table "
        "does not say why, or when this page is out of date. The bindings each SDK sits on "
        "(cache queries, writes, object fields) follow `wit/plugin.wit`; the guides show them "
        "per language. For Rust, `cargo doc -p kubewasm-sdk --features guest --open` gives "
        "rustdoc's full pages.",
        "",
    ]
    for area in table["areas"]:
        out += [f"## {area['area']}", "", "| what | Rust | Python | JavaScript |", "|---|---|---|---|"]
        for what, *entries in area["rows"]:
            cells = [cell(e) for e in entries]
            out.append(f"| {what} | " + " | ".join(cells) + " |")
        out.append("")
    titles = {"rust": "Rust (`kubewasm_sdk`)", "python": "Python (`kubewasm_sdk`)",
              "javascript": "JavaScript (`kubewasm-sdk/index.js`)"}
    for language in LANGUAGES:
        out += [f"## {titles[language]}", ""]
        for name, doc in sorted(found[language].items(), key=lambda kv: kv[0].lower()):
            out.append(f"- `{name}`" + (f": {doc}" if doc else ""))
        out.append("")
    return "\n".join(out)


def main():
    found = {"rust": rust_items(), "python": python_items(), "javascript": javascript_items()}
    if "--list" in sys.argv[1:]:
        for language, items in found.items():
            for name, doc in sorted(items.items()):
                print(f"{language}\t{name}\t{doc}")
        return 0
    table = json.loads(read(SDK, "parity.json"))
    parameters = {"python": python_parameters(), "javascript": javascript_parameters()}
    problems = check(table, found, parameters)
    text = page(table, found)
    if "--check" in sys.argv[1:]:
        current = read(PAGE) if os.path.exists(PAGE) else ""
        if current != text:
            problems.append("docs/SDK-REFERENCE.md is out of date: run scripts/sdk_reference.py")
        for p in problems:
            print(p, file=sys.stderr)
        return 1 if problems else 0
    for p in problems:
        print(p, file=sys.stderr)
    with open(PAGE, "w", encoding="utf-8") as f:
        f.write(text)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
