"""The code's shape, checked from its source: no function in csrc/ and no
function in python/fxcut/ longer than 60 lines (issue 37).

A function's length is the number of lines between its opening brace and
its closing brace, the brace lines excluded; every line counts, blank and
comment lines included.  The scanner reads C with comments, string and
character literals and preprocessor directives blanked out (their newlines
kept), so braces inside them do not count, and a signature may span several
lines.

A Python function's length is its number of lines of code: the lines from
its ``def`` to its last line that hold a token other than a comment, the
docstring left out (a multi-line expression counts every line it spans).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path
from typing import NamedTuple

CSRC = Path(__file__).resolve().parent.parent / "csrc"
PACKAGE = Path(__file__).resolve().parent.parent / "python" / "fxcut"
MAX_LINES = 60


class CFunction(NamedTuple):
    name: str
    line: int  # 1-based line of the opening brace
    lines: int  # lines strictly between the opening and the closing brace


def _blank(text: str) -> str:
    """``text`` with comments, string and char literals and preprocessor
    directives replaced by spaces; newlines (and so line numbers) are kept."""
    out: list[str] = []
    i, n = 0, len(text)
    at_line_start = True  # only whitespace since the last newline
    while i < n:
        c = text[i]
        if c == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
            continue
        if c == "/" and text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i = end
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            end = min(j + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:end - 1]) + c)
            i = end
            at_line_start = False
            continue
        if c == "#" and at_line_start:
            # a directive runs to the first newline not escaped by a backslash
            j = i
            while j < n and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        out.append(c)
        if c == "\n":
            at_line_start = True
        elif not c.isspace():
            at_line_start = False
        i += 1
    return "".join(out)


def _strip_parens(s: str) -> tuple[str, str] | None:
    """Splits ``s`` (ending in ')') into what precedes its last balanced
    parenthesized group and that group; None when unbalanced."""
    depth = 0
    for k in range(len(s) - 1, -1, -1):
        if s[k] == ")":
            depth += 1
        elif s[k] == "(":
            depth -= 1
            if depth == 0:
                return s[:k].rstrip(), s[k:]
    return None


def _function_name(header: str) -> str | None:
    """The name a definition's header declares (``static int f(void)`` ->
    ``f``, ``FN(push)(...)`` -> ``FN(push)``), or None when the header is no
    function definition's (a struct, an initializer, ...)."""
    header = re.sub(r"__attribute__\s*\(\(.*?\)\)", " ", header, flags=re.S).strip()
    if not header.endswith(")") or re.match(r"(typedef|struct|union|enum)\b", header):
        return None
    split = _strip_parens(header)
    if split is None:
        return None
    before, _params = split
    if "=" in re.sub(r"\([^()]*\)", "", before):
        return None
    m = re.search(r"(\w+)$", before)
    if m:
        return m.group(1)
    if before.endswith(")"):  # a macro call naming the function: FN(name)(...)
        inner = _strip_parens(before)
        if inner is not None:
            m = re.search(r"(\w+)$", inner[0])
            if m:
                return m.group(1) + re.sub(r"\s+", "", inner[1])
    return None


def c_functions(text: str) -> list[CFunction]:
    """Every function defined at file scope in the C source ``text``."""
    code = _blank(text)
    found: list[CFunction] = []
    depth = 0
    header_start = 0  # where the text after the last file-scope ';', '}' starts
    open_at = 0
    name: str | None = None
    for k, c in enumerate(code):
        if c == "{":
            if depth == 0:
                name = _function_name(code[header_start:k])
                open_at = k
            depth += 1
        elif c == "}":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced '}}' at line {code.count(chr(10), 0, k) + 1}")
            if depth == 0:
                if name is not None:
                    first = code.count("\n", 0, open_at) + 1
                    last = code.count("\n", 0, k) + 1
                    found.append(CFunction(name, first, max(last - first - 1, 0)))
                name = None
                header_start = k + 1
        elif c == ";" and depth == 0:
            header_start = k + 1
    if depth != 0:
        raise ValueError("unbalanced '{' at the end of the file")
    return found


def _c_sources() -> list[Path]:
    return sorted(CSRC.glob("*.c")) + sorted(CSRC.glob("*.h"))


def test_every_c_function_is_at_most_60_lines():
    sources = _c_sources()
    assert sources, f"no C sources under {CSRC}"
    offenders = []
    for path in sources:
        for fn in c_functions(path.read_text()):
            if fn.lines > MAX_LINES:
                offenders.append(f"{path.relative_to(CSRC.parent)}:{fn.line} {fn.name} {fn.lines}")
    assert not offenders, (f"C functions longer than {MAX_LINES} lines "
                           "(split them into static helpers):\n" + "\n".join(offenders))


def _synthetic(body_lines: int) -> str:
    body = ["    int x = 0; /* a } in a comment */",
            "    const char *s = \"{ not a brace\";",
            "    char c = '}';",
            "    // }}}",
            ""]
    body = (body * body_lines)[:body_lines]
    return ("#include <stdio.h>\n"
            "#define BRACE {\n"
            "struct point { int x, y; };\n"
            "static const int table[] = {1, 2, 3};\n"
            "static int\n"
            "long_function(int a,\n"
            "              const char *b)\n"
            "{\n" + "\n".join(body) + "\n}\n"
            "static int short_one(void) { return 0; }\n")


def test_the_scanner_finds_a_61_line_function():
    fns = c_functions(_synthetic(61))
    assert fns == [CFunction("long_function", 8, 61), CFunction("short_one", 71, 0)]
    assert [f.lines for f in c_functions(_synthetic(60))] == [60, 0]
    # the template's macro-named functions are found too
    template = "static int\nFN(push)(int v)\n{\n" + "    v++;\n" * 61 + "    return v;\n}\n"
    assert c_functions(template) == [CFunction("FN(push)", 3, 62)]


def test_the_scanner_sees_every_c_function():
    # a sanity check against a silently empty scan: the core's entry points are found
    names = {f.name for p in _c_sources() for f in c_functions(p.read_text())}
    assert {"fxcut_memsim_new", "fxcut_load_graph", "FN(fxcut_push_relabel)"} <= names


_NOT_CODE = frozenset({tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                       tokenize.ENDMARKER})


def _docstring_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> range:
    first = fn.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return range(first.lineno, (first.end_lineno or first.lineno) + 1)
    return range(0)


def python_code_lines(source: str, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The lines of ``fn`` (in ``source``) that hold code: not blank, not
    only a comment, not its docstring."""
    end = fn.end_lineno or fn.lineno
    text = "\n".join(source.splitlines()[fn.lineno - 1:end]) + "\n"
    doc = _docstring_lines(fn)
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in _NOT_CODE:
            continue
        for k in range(tok.start[0], tok.end[0] + 1):
            line = fn.lineno + k - 1
            if line not in doc:
                lines.add(line)
    return len(lines)


def python_functions(source: str) -> list[tuple[str, int, int]]:
    """(name, line, lines of code) of every function and method in ``source``, nested ones included."""
    return [(node.name, node.lineno, python_code_lines(source, node)) for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_every_python_function_is_at_most_60_lines_of_code():
    sources = sorted(PACKAGE.rglob("*.py"))
    assert len(sources) > 50  # the package, not an empty folder
    too_long = [f"{path.relative_to(PACKAGE)}:{line} {name}: {n} lines"
                for path in sources for name, line, n in python_functions(path.read_text())
                if n > MAX_LINES]
    assert not too_long, "functions longer than 60 lines of code:\n" + "\n".join(too_long)


def test_the_python_scanner_counts_code_not_docstrings_or_comments():
    body = "".join(f"    x{k} = {k}\n" for k in range(59))
    source = (f'def f(a,\n      b):\n    """doc\n\n    more doc"""\n    # a comment\n\n{body}'
              "    return (a +\n            b)\n")
    assert python_functions(source) == [("f", 1, 2 + 59 + 2)]  # the def's two lines, the body, the return's two
    assert python_code_lines(source, ast.parse(source).body[0]) == 63  # type: ignore[arg-type]
    nested = "def outer():\n    def inner():\n        return 1\n    return inner\n"
    assert sorted(python_functions(nested)) == [("inner", 2, 2), ("outer", 1, 4)]
