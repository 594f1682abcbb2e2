"""The report as a document: a list of blocks (headings, paragraphs, bullets, tables, code,
images) written once as Markdown and once as one self-contained HTML page (CSS inline, images as
data URIs, no script, no URL), every string escaped for the format it lands in. It knows nothing
of benchmarks: :mod:`hpcbench.bench.reporting.report` builds the blocks.
"""

from __future__ import annotations

import base64
import html
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hpcbench.bench.reporting.plotting import DPI


@dataclass
class Heading:
    level: int
    text: str
    anchor: str = ""


@dataclass
class Para:
    text: str
    css: str = ""  # "note" (a figure replaced by a sentence), "warn"


@dataclass
class Bullets:
    items: list[str]


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]
    numeric: set[int] = field(default_factory=set)  # column indexes aligned right


@dataclass
class Code:
    text: str


@dataclass
class Image:
    title: str
    caption: str
    rel_path: str  # from the report's directory
    png: bytes


Block = Heading | Para | Bullets | Table | Code | Image

# Backslash-escaped (CommonMark shows an escaped character literally): what starts inline HTML,
# an entity, code, emphasis or a table cell; brackets only where they would close a link.
_MD_SPECIAL = re.compile(r"([\\`*<>|&])|(\])(?=[(\[])")


def visible(text: Any, keep: str = "") -> str:
    """``text`` with control characters (terminal escapes), bidirectional and other format
    characters (U+202E turns text around) and line separators written as escapes (``\\x1b``,
    ``\\u202e``): ``cat report.md`` runs nothing, and a name reads as it is stored. ``keep``:
    characters left as they are (newlines and tabs of a code block)."""
    return "".join(
        c
        if c in keep or unicodedata.category(c) not in ("Cc", "Cf", "Zl", "Zp")
        else c.encode("unicode_escape").decode("ascii")
        for c in str(text)
    )


def md_text(text: Any) -> str:
    """Text for Markdown: one line, with the characters that would start markup, HTML or a
    table cell backslash-escaped, and control characters shown as escapes."""
    line = visible(" ".join(str(text).split()))
    return _MD_SPECIAL.sub(lambda m: "\\" + (m.group(1) or m.group(2)), line)


def to_markdown(blocks: Sequence[Block]) -> str:
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            out.append(f"{'#' * b.level} {md_text(b.text)}")
        elif isinstance(b, Para):
            out.append(("> " if b.css else "") + md_text(b.text))
        elif isinstance(b, Bullets):
            out.append("\n".join(f"- {md_text(i)}" for i in b.items))
        elif isinstance(b, Table):
            lines = ["| " + " | ".join(md_text(h) for h in b.header) + " |"]
            lines.append(
                "|"
                + "|".join("---:" if i in b.numeric else "---" for i in range(len(b.header)))
                + "|"
            )
            lines += ["| " + " | ".join(md_text(c) for c in row) + " |" for row in b.rows]
            out.append("\n".join(lines))
        elif isinstance(b, Code):
            longest = max((len(m) for m in re.findall(r"`+", b.text)), default=0)
            fence = "`" * max(3, longest + 1)
            out.append(f"{fence}text\n{visible(b.text.rstrip(), keep=CODE_KEEP)}\n{fence}")
        elif isinstance(b, Image):
            out.append(f"![{md_text(b.title)}]({b.rel_path})\n\n*{md_text(b.caption)}*")
    return "\n\n".join(out) + "\n"


CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
 max-width:1100px;margin:2em auto;padding:0 1.5em;color:#1b1b1b;line-height:1.5;
 background:#fff}
h1{font-size:1.8em;border-bottom:2px solid #0072b2;padding-bottom:.2em}
h2{font-size:1.35em;margin-top:2em;border-bottom:1px solid #ddd;padding-bottom:.15em}
h3{font-size:1.1em;margin-top:1.5em}
table{border-collapse:collapse;margin:.8em 0 1.2em;font-size:.92em;display:block;
 overflow-x:auto}
th,td{border:1px solid #d0d0d0;padding:.3em .6em;vertical-align:top}
th{background:#f0f4f8;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr:nth-child(even) td{background:#fafafa}
figure{margin:1.2em 0 2em}
figure img{max-width:100%;height:auto;border:1px solid #e4e4e4}
figcaption{font-size:.9em;color:#444;margin-top:.4em}
p.note{background:#fff8e1;border-left:4px solid #e69f00;padding:.5em .8em}
p.warn{background:#fdecea;border-left:4px solid #b00020;padding:.5em .8em}
pre{background:#f6f6f6;border:1px solid #e0e0e0;padding:.6em;overflow-x:auto;
 white-space:pre-wrap;word-break:break-word;font-size:.88em}
ul.summary li{margin:.2em 0}
.ci{color:#555;font-size:.85em}
"""


CODE_KEEP = "\n\t"  # what a code block keeps of the control characters


def esc(text: Any, keep: str = "") -> str:
    """Text for HTML, escaped (control and format characters as in :func:`visible`); a per
    cent sign stays on the line of its number."""
    return html.escape(visible(text, keep), quote=True).replace(" %", "\u00a0%")


def _size(png: bytes) -> str:
    """``width``/``height`` attributes showing a figure at its size in inches (96 CSS px each),
    so that every figure's text has the same size on the page (CSS caps it at the page width)."""
    if png[:8] != b"\x89PNG\r\n\x1a\n" or len(png) < 24:
        return ""
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    return f' width="{round(width * 96 / DPI)}" height="{round(height * 96 / DPI)}"'


def _num_cell(text: str) -> str:
    """A number cell; the interval and n of ``median unit [lo, hi], n = k`` on a second line."""
    main, sep, rest = text.partition(" [")
    if not sep:
        main, sep, rest = text.partition(", n = ")
        rest = "n = " + rest
    if not sep:
        return f'<td class="num">{esc(text)}</td>'
    detail = ("[" if sep == " [" else "") + rest
    return f'<td class="num">{esc(main)}<br><span class="ci">{esc(detail)}</span></td>'


def to_html(blocks: Sequence[Block], title: str) -> str:
    body: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            anchor = f' id="{esc(b.anchor)}"' if b.anchor else ""
            body.append(f"<h{b.level}{anchor}>{esc(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            css = f' class="{b.css}"' if b.css else ""
            body.append(f"<p{css}>{esc(b.text)}</p>")
        elif isinstance(b, Bullets):
            items = "".join(f"<li>{esc(i)}</li>" for i in b.items)
            body.append(f'<ul class="summary">{items}</ul>')
        elif isinstance(b, Table):
            head = "".join(f"<th>{esc(h)}</th>" for h in b.header)
            rows = "".join(
                "<tr>"
                + "".join(
                    _num_cell(c) if i in b.numeric else f"<td>{esc(c)}</td>"
                    for i, c in enumerate(row)
                )
                + "</tr>"
                for row in b.rows
            )
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif isinstance(b, Code):
            body.append(f"<pre>{esc(b.text.rstrip(), keep=CODE_KEEP)}</pre>")
        elif isinstance(b, Image):
            data = base64.b64encode(b.png).decode("ascii")
            body.append(
                f'<figure><img class="plot" alt="{esc(b.title)}"{_size(b.png)} '
                f'src="data:image/png;base64,{data}">'
                f"<figcaption>{esc(b.caption)}</figcaption></figure>"
            )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )
