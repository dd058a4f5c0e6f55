#!/usr/bin/env python3
"""The SDKs' API reference (docs/SDK-REFERENCE.md) and the check that the four SDKs are at parity.

plugin-sdk/parity.json lists every helper the SDKs offer, one row per helper with its name in
Rust, Python, JavaScript and Go (or "-" and why a language has none). This script reads what
each SDK defines from its sources, with each item's signature (Rust `pub` items and their `///`
docs; Python's public names and docstrings, with `ast`; JavaScript's exports and their `/** */`
docs; Go's exported names and their `//` docs), adds the calls each language takes straight from
the contract's bindings (the `cache`, `cluster`, `state`, `triggers` and `metrics` interfaces of
wit/plugin.wit, with their WIT docs), and:

  scripts/sdk_reference.py          writes docs/SDK-REFERENCE.md from the table and the docs
  scripts/sdk_reference.py --check  fails, naming what differs, when a row names something an
                                    SDK does not define, when an SDK defines a public helper no
                                    row names, when a helper has no doc, or when the page is
                                    not what this script writes (host/tests/all/languages.rs runs it)
"""

import ast
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SDK = os.path.join(ROOT, "plugin-sdk")
PAGE = os.path.join(ROOT, "docs", "SDK-REFERENCE.md")
LANGUAGES = ("rust", "python", "javascript", "go")
WIT = os.path.join(ROOT, "wit", "plugin.wit")
# The contract's imported interfaces a plugin calls through its language's bindings, with the
# prefix each language reaches them by.
BOUND = ("cache", "cluster", "state", "triggers", "metrics")
# The modules of the Python and the JavaScript SDK that define helpers.
PYTHON_MODULES = ("__init__.py", "selector.py", "status.py")
JAVASCRIPT_MODULES = ("index.js", "selector.js", "status.js")
# The Go SDK's subpackages with helpers of their own (config has only Parse, named in a row).
GO_PACKAGES = ("config", "status")


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
                items["::".join(path + [m.group(1)])] = (
                    first_paragraph("\n".join(doc)), rust_signature(lines, lines.index(line)))
            if not stripped.startswith("//"):
                doc = []
    return items


def rust_signature(lines, at):
    """The declaration starting at line `at`, up to its body or end, on one line."""
    text = ""
    for line in lines[at:at + 12]:
        text += " " + line.strip()
        if re.search(r"[{;]\s*$", line) or line.strip().endswith("{"):
            break
    text = re.sub(r"\s*[{;]\s*$", "", text.strip())
    text = re.sub(r"\s+", " ", text).replace("( ", "(").replace(", )", ")")
    return text.replace("pub ", "", 1)


def python_items():
    """Public names of the Python SDK (`__all__`, and the public members of the classes and
    objects it exports: `state.get`, `Selector.matches`), with their docstrings."""
    items = {}
    for module in PYTHON_MODULES:
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
                    items[f"{prefix}.{node.name}"] = (
                        first_paragraph(ast.get_docstring(node)), python_signature(node))
                elif isinstance(node, ast.Assign):
                    for t in node.targets:
                        if isinstance(t, ast.Name) and not t.id.startswith("_"):
                            nxt = body[i + 1] if i + 1 < len(body) else None
                            text = (nxt.value.value if isinstance(nxt, ast.Expr)
                                    and isinstance(nxt.value, ast.Constant) else "")
                            items[f"{prefix}.{t.id}"] = (first_paragraph(text), "")

        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                if node.name.startswith("_") or (exported is not None and node.name not in exported):
                    continue
                signature = python_signature(node) if isinstance(node, ast.FunctionDef) else ""
                items[node.name] = (first_paragraph(ast.get_docstring(node)), signature)
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
                        items[t.id] = (first_paragraph(ast.get_docstring(cls)), "")
                        members(t.id, cls)
                    else:
                        items[t.id] = ("", "")
    return items


def python_signature(node):
    """`def name(parameters) -> returns`, as written."""
    returns = f" -> {ast.unparse(node.returns)}" if node.returns else ""
    return f"def {node.name}({ast.unparse(node.args)}){returns}"


def javascript_items():
    """Exports of the JavaScript SDK, with the members of exported objects and classes
    (`state.get`, `Selector.matches`), and their `/** */` docs."""
    items = {}
    for module in JAVASCRIPT_MODULES:
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
                signature = re.sub(r"\s*\{\s*$", "", s.replace("export ", "", 1))
                if not s.startswith("export function"):
                    signature = ""
                items[m.group(1)] = (first_paragraph("\n".join(doc)), signature)
                doc = []
                opens = s.count("{") - s.count("}")
                if (s.startswith("export class") or "Object.freeze({" in s) and opens > 0:
                    container, depth = m.group(1), opens
                continue
            if container:
                m = re.match(r"(?:static )?(\w+)(?:: |\()", s)
                if m and depth == 1 and m.group(1) not in ("constructor", "return", "if", "for"):
                    signature = re.sub(r"\s*\{\s*$", "", s) if "(" in s else ""
                    items[f"{container}.{m.group(1)}"] = (first_paragraph("\n".join(doc)), signature)
                depth += s.count("{") - s.count("}")
                if depth <= 0:
                    container = None
            if not s.startswith("//"):
                doc = []
            m = re.match(r"export \{ (\w+) \} from", s)
            if m:
                items.setdefault(m.group(1), ("", ""))
    return items


def go_items(generated=False):
    """Exported names of the Go SDK: functions, types, constants and variables, and methods by
    their type (`Object.Text`), or by the package variable that holds an unexported type's
    methods (`Cluster.Apply`), with their `//` docs and signatures. The hand-written files, or
    with `generated` the contract's bindings (bindings.go, every type and call of the WIT)."""
    items = {}
    holders = {}  # unexported type -> the exported variable of that type
    # The SDK's package, and its subpackages by their name (`status.New`).
    files = [("", n) for n in sorted(os.listdir(os.path.join(SDK, "go")))]
    for package in GO_PACKAGES:
        files += [(f"{package}.", os.path.join(package, n))
                  for n in sorted(os.listdir(os.path.join(SDK, "go", package)))]
    files = [(p, n) for p, n in files if n.endswith(".go") and not n.endswith("_test.go")]
    for _, n in files:
        for m in re.finditer(r"^var ([A-Z]\w*) ([a-z]\w*)$", read(SDK, "go", n), re.M):
            holders[m.group(2)] = m.group(1)
    sources = [(p, read(SDK, "go", n)) for p, n in files if (n == "bindings.go") == generated]
    for prefix, text in sources:
        doc = []
        block = None  # "var" or "const" inside a ( ... ) block
        for line in text.splitlines():
            s = line.strip()
            if s.startswith("//go:") or s.startswith("// Code generated"):
                doc = []
                continue
            if s.startswith("//"):
                doc.append(s[2:].strip())
                continue
            if block:
                if s == ")":
                    block = None
                m = re.match(r"([A-Z]\w*)\b(?: \w+)?\s*(?:=|$)", s)
                if m and block == "const" or m and block == "var":
                    items[prefix + m.group(1)] = (first_paragraph("\n".join(doc)), "")
                doc = [] if s else doc
                continue
            m = re.match(r"(var|const) \($", s)
            if m:
                block, doc = m.group(1), []
                continue
            m = re.match(r"func \((?:\w+ )?\*?(\w+)\) ([A-Z]\w*)\((.*)", s)
            if m:
                owner = m.group(1)
                owner = holders.get(owner, owner if owner[0].isupper() else None)
                # `Error` and `String` implement Go's interfaces, as trait impls do in Rust.
                implements = m.group(2) in ("Error", "String") and m.group(3).startswith(")")
                if owner and not implements:
                    signature = re.sub(r"\s*\{.*$", "", s)
                    items[f"{prefix}{owner}.{m.group(2)}"] = (first_paragraph("\n".join(doc)), signature)
                doc = []
                continue
            m = re.match(r"func ([A-Z]\w*)(?:\[[^\]]*\])?\(", s)
            if m:
                items[prefix + m.group(1)] = (first_paragraph("\n".join(doc)), re.sub(r"\s*\{.*$", "", s))
                doc = []
                continue
            m = re.match(r"(type|var|const) ([A-Z]\w*)\b", s)
            if m:
                items[prefix + m.group(2)] = (first_paragraph("\n".join(doc)), "")
            doc = []
    return items


def wit_functions():
    """The functions of the contract's imported interfaces a plugin calls through its
    bindings, by interface: (name, WIT signature, doc)."""
    out = {}
    interface, doc, depth = None, [], 0
    for line in read(WIT).splitlines():
        s = line.strip()
        m = re.match(r"interface ([\w-]+) \{", s)
        if m and depth == 0:
            interface, doc = m.group(1), []
        depth += s.count("{") - s.count("}")
        if s.startswith("///"):
            doc.append(s[3:].strip())
            continue
        if interface in BOUND and depth == 1:
            m = re.match(r"([\w-]+): func(\(.*)", s)
            if m:
                out.setdefault(interface, []).append(
                    (m.group(1), re.sub(r";$", "", m.group(2)), first_paragraph("\n".join(doc))))
        if depth == 0:
            interface = None
        doc = []
    return out


def camel(name, upper=False):
    """A WIT name (`record-event`) in camelCase, or PascalCase with `upper`."""
    parts = name.split("-")
    text = parts[0] + "".join(p.title() for p in parts[1:])
    return text[:1].upper() + text[1:] if upper else text


def bound_items(language):
    """The contract's functions as `language` names them, with their WIT docs and signatures:
    Rust `cluster::apply`, Python `cluster.apply`, JavaScript `cluster.apply` (imported from
    `kubewasm:plugin/cluster`), Go `Cluster.Apply` (defined in the SDK's bindings.go)."""
    items = {}
    for interface, functions in wit_functions().items():
        for name, signature, doc in functions:
            if language == "rust":
                key = f"{interface}::{name.replace('-', '_')}"
            elif language == "python":
                key = f"{interface}.{name.replace('-', '_')}"
            elif language == "javascript":
                key = f"{interface}.{camel(name)}"
            else:
                continue
            items[key] = (doc, f"{name}: func{signature}")
    if language == "go":
        items = go_items(generated=True)
    return items


def python_parameters():
    """Parameter names of the Python SDK's functions, by function name."""
    out = {}
    for module in PYTHON_MODULES:
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
    for module in JAVASCRIPT_MODULES:
        text = read(SDK, "javascript", module)
        for m in re.finditer(r"export function (\w+)\((.*?)\)\s*\{\n", text, re.S):
            out[m.group(1)] = set(re.findall(r"(?:\.\.\.)?\b([A-Za-z_]\w*)\b(?=\s*(?:=|,|\}|$))", m.group(2)))
    return out


def check(table, found, bound, parameters):
    """Everything wrong with the table against the SDKs' sources, as lines."""
    problems = []
    named = {language: set() for language in LANGUAGES}
    for area in table["areas"]:
        for row in area["rows"]:
            what, entries = row[0], dict(zip(LANGUAGES, row[1:]))
            if len(row) != len(LANGUAGES) + 1:
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
                if name not in found[language] and name not in bound[language]:
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
            doc = (found[language].get(name) or bound[language].get(name) or ("", ""))[0]
            if not doc and not name.split(".")[-1].isupper() and not re.fullmatch(r"Index[A-Z]\w*|[A-Z][a-z]+", name.split(".")[-1]) :
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


def page(table, found, bound):
    out = [
        "# SDK reference",
        "",
        "Written by `scripts/sdk_reference.py` from `plugin-sdk/parity.json` and the SDKs' own "
        "doc comments (Rust `///`, Python docstrings, JavaScript `/** */`, Go `//`); do not edit "
        "by hand. A test (`host/tests/all/languages.rs`) fails when an SDK lacks a helper another has "
        "and the table does not say why, or when this page is out of date. Calls marked "
        "*bindings* come straight from the contract (`wit/plugin.wit`): Rust reaches `cluster` "
        "through `kubewasm_sdk::cluster`, Python imports `cache`, `cluster`, `state` and "
        "`triggers` from `wit_world.imports`, JavaScript imports each function from "
        "`kubewasm:plugin/<interface>@0.4.0`, and Go calls them on `Cache`, `Cluster`, `State` "
        "and `Triggers`. For Rust, `cargo doc -p kubewasm-sdk --features guest --open` gives "
        "rustdoc's full pages; for Go, `GOOS=wasip1 GOARCH=wasm go doc -all` in a plugin "
        "project (docs/guides/go.md).",
        "",
    ]
    for area in table["areas"]:
        out += [f"## {area['area']}", "", "| what | Rust | Python | JavaScript | Go |",
                "|---|---|---|---|---|"]
        for what, *entries in area["rows"]:
            cells = [cell(e) for e in entries]
            out.append(f"| {what} | " + " | ".join(cells) + " |")
        out.append("")
    titles = {"rust": "Rust (`kubewasm_sdk`)", "python": "Python (`kubewasm_sdk`)",
              "javascript": "JavaScript (`kubewasm-sdk/index.js`)",
              "go": "Go (`example.invalid/kubewasm/sdk`)"}
    named = {language: set() for language in LANGUAGES}
    for area in table["areas"]:
        for row in area["rows"]:
            for language, entry in zip(LANGUAGES, row[1:]):
                if not entry.startswith("-"):
                    named[language].add(entry.partition("(")[0])
    for language in LANGUAGES:
        out += [f"## {titles[language]}", ""]
        shown = dict(found[language])
        for name in named[language]:
            if name not in shown and name in bound[language]:
                doc, signature = bound[language][name]
                shown[name] = (f"*bindings.* {doc}".strip(), signature)
        for name, (doc, signature) in sorted(shown.items(), key=lambda kv: kv[0].lower()):
            line = f"- `{name}`"
            if signature:
                line += f" `{signature}`"
            out.append(line + (f": {doc}" if doc else ""))
        out.append("")
    return "\n".join(out)


def main():
    found = {"rust": rust_items(), "python": python_items(), "javascript": javascript_items(),
             "go": go_items()}
    bound = {language: bound_items(language) for language in LANGUAGES}
    if "--list" in sys.argv[1:]:
        for language, items in found.items():
            for name, (doc, signature) in sorted(items.items()):
                print(f"{language}\t{name}\t{signature}\t{doc}")
        return 0
    table = json.loads(read(SDK, "parity.json"))
    parameters = {"python": python_parameters(), "javascript": javascript_parameters()}
    problems = check(table, found, bound, parameters)
    text = page(table, found, bound)
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
