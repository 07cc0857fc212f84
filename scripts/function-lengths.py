#!/usr/bin/env python3
"""Counts the lines of every function body in kdp's C++ sources and fails on
those longer than the limit (docs/architecture.md, "How a function's length
is counted").

A function is any brace-enclosed body that follows a parameter list: free
functions, member functions defined in a class, constructors (with their
initializer lists), function templates and their specialisations, and
lambdas written outside a function. A lambda inside a function counts toward
that function. A body's length is the number of lines from the line of its
opening brace to the line of its closing brace, both included; comments and
blank lines inside count as they stand.

    scripts/function-lengths.py [--limit N] [--top K] [PATH...]

PATHs are files or folders (default: src tools examples); folders are
searched for .cpp, .hpp, .h and .inc files. Prints each function over the
limit as 'LINES path:line name' and exits 1 if there is one; --top K prints
the K longest whatever their length.
"""
import argparse
import os
import re
import sys

SUFFIXES = (".cpp", ".hpp", ".h", ".inc")
QUALIFIERS = re.compile(
    r"(\s*(const|volatile|noexcept(\s*\([^()]*\))?|override|final|mutable|&&|&|"
    r"->\s*[\w:<>,\s\*&]+))*\s*$"
)
SCOPE = re.compile(r"\b(namespace|class|struct|union|enum)\b|extern\s*\"\"")
CONTROL = re.compile(r"\b(if|for|while|switch|catch|do|else|try)\s*$")


def blank_out(text):
    """The text with comments, string and character literals and preprocessor
    lines replaced by spaces (newlines kept, so line numbers hold)."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":  # a directive, with its continuation lines
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        line_start = False
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
            continue
        raw = re.match(r'R"([^(\s]*)\(', text[i:i + 20])
        if raw:  # a raw string literal
            end = text.find(")" + raw.group(1) + '"', i)
            end = n if end < 0 else end + len(raw.group(1)) + 2
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:end]))
            i = end
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (j - i - 1) + c)
            i = j + 1
            continue
        if c == "\n":
            line_start = True
        out.append(c)
        i += 1
    return "".join(out)


def parameter_list_start(bare):
    """The index of the '(' that matches `bare`'s last ')'."""
    depth, k = 0, len(bare)
    while k > 0:
        k -= 1
        depth += {")": 1, "(": -1}.get(bare[k], 0)
        if depth == 0:
            break
    return k


def opens_function(header):
    """Whether a brace after `header` (the text since the last statement or
    block) opens a function body."""
    h = " ".join(header.split())
    bare = QUALIFIERS.sub("", h)
    if not h or SCOPE.search(h) and not bare.endswith(")"):
        return False
    if re.search(r"\[[^\[\]]*\]\s*$", bare):  # a lambda without parameters
        return True
    if not bare.endswith(")"):
        return False
    return not CONTROL.search(bare[: parameter_list_start(bare)])


def function_name(header):
    """The name before the parameter list (a constructor's, before its
    initializer list)."""
    bare = QUALIFIERS.sub("", " ".join(header.split()))
    init = re.search(r"\)\s*:[^:]", bare)
    if init:
        bare = bare[: init.start() + 1]
    head = bare[: parameter_list_start(bare)] if bare.endswith(")") else bare
    lambda_of = re.search(r"([\w:]+)\s*=\s*\[[^\]]*\]\s*$", head)
    if lambda_of or re.search(r"\[[^\]]*\]\s*$", head):
        return lambda_of.group(1) if lambda_of else "(lambda)"
    m = re.search(r"([~\w:]+(<[^()]*>)?)\s*$", head)
    return m.group(1) if m else "?"


def functions(path):
    """(lines, first line, name) of each function body in the file."""
    text = blank_out(open(path, encoding="utf-8", errors="replace").read())
    found = []
    stack = []  # per open brace: ("function" | "init" | "block", line, name)
    header = ""
    line = 1
    for c in text:
        if c == "\n":
            line += 1
            header += " "
        elif c == "{":
            inside = any(kind == "function" for kind, _, _ in stack)
            h = " ".join(header.split())
            if inside:
                stack.append(("block", line, ""))
                header = ""
            elif opens_function(header):
                stack.append(("function", line, function_name(header)))
                header = ""
            elif re.search(r"(=|\w|>|\)|,|\()\s*$", h) and not SCOPE.search(h):
                stack.append(("init", line, ""))  # a braced initializer: the header goes on
            else:
                stack.append(("block", line, ""))
                header = ""
        elif c == "}":
            if stack:
                kind, first, name = stack.pop()
                if kind == "function":
                    found.append((line - first + 1, first, name))
                if kind != "init":
                    header = ""
        elif c == ";":
            header = ""
        else:
            header += c
    return found


def sources(paths):
    for p in paths:
        if os.path.isdir(p):
            for root, _, names in os.walk(p):
                for name in sorted(names):
                    if name.endswith(SUFFIXES):
                        yield os.path.join(root, name)
        elif os.path.exists(p):
            yield p


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=80)
    parser.add_argument("--top", type=int, default=0)
    parser.add_argument("paths", nargs="*", default=["src", "tools", "examples"])
    args = parser.parse_args()
    rows = []
    for path in sources(args.paths):
        rows += [(n, f"{path}:{first}", name) for n, first, name in functions(path)]
    rows.sort(key=lambda r: (-r[0], r[1]))
    over = [r for r in rows if r[0] > args.limit]
    for n, where, name in (rows[: args.top] if args.top else over):
        print(f"{n} {where} {name}")
    if over:
        print(f"function-lengths: {len(over)} function(s) over {args.limit} lines", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
