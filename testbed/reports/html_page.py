"""The parts of a self-contained static HTML page: inline SVG figures, tables, the log-axis
toggle, and the document around them.

Nothing on the page is fetched when it is opened (a results folder is often read offline,
or copied off the machine): figures are matplotlib's SVG inlined into the document, the
CSS and JS are inline, the font is the browser's own, and a Content-Security-Policy
forbids every fetch, so an accidental external reference fails loudly in the browser's
console instead of silently phoning out.

Inlined SVGs share one document, so each figure's element ids get a per-figure prefix
(matplotlib's ids for glyphs and clip paths would otherwise collide across figures).
Artists drawn for a policy carry the gid of :func:`policy_gid`; on the page they become
``<g class="policy" data-policy=NAME data-role=ROLE>``, which tests and readers can find.
"""

from __future__ import annotations

import html
import io
import re
from collections.abc import Iterable, Sequence

from matplotlib import rc_context
from matplotlib.backends.backend_svg import FigureCanvasSVG
from matplotlib.figure import Figure

from testbed.reports.colours import policy_colour

_GID = "tbpolicy"
_POLICY_GID = re.compile(rf'id="{_GID}-([a-z]+)-([0-9a-f]*)"')

CSP = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
       "img-src data:")
"""Everything inline, nothing fetched."""

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px;
       padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; }
figure.plot { margin: 1em 0; }
figure.plot svg { max-width: 100%; height: auto; }
figure.plot figcaption { font-size: 0.9em; color: #555; }
body:not(.log-x) figure.plot[data-view="log"] { display: none; }
body.log-x figure.plot[data-view="linear"] { display: none; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
td { white-space: nowrap; } div.scroll { overflow-x: auto; }
td.nonzero { background: #fde2e2; font-weight: bold; }
.key span.policy { display: inline-block; margin-right: 1.2em; }
.key span.swatch { display: inline-block; width: 1.6em; height: 0.8em;
                   margin-right: 0.3em; vertical-align: middle; }
.note { background: #fff6d5; border-left: 4px solid #ddcc77; padding: 0.5em 1em; }
.toggle { margin: 0.5em 0; }
"""

_JS = """
const box = document.getElementById("log-x");
if (box) {
  const apply = () => document.body.classList.toggle("log-x", box.checked);
  box.addEventListener("change", apply);
  apply();
}
"""


def policy_gid(policy: str, role: str) -> str:
    """The matplotlib ``gid`` that marks an artist as ``policy``'s ``role`` (a lowercase
    word: ``line``, ``band``, ...); the name travels hex-encoded, so any name fits."""
    return f"{_GID}-{role}-{policy.encode('utf-8').hex()}"


def _tag_policies(svg: str) -> str:
    """Replace policy gids with ``class``/``data-policy``/``data-role`` attributes."""
    def attributes(match: re.Match[str]) -> str:
        name = bytes.fromhex(match.group(2)).decode("utf-8")
        return (f'class="policy" data-policy="{html.escape(name, quote=True)}" '
                f'data-role="{match.group(1)}"')

    return _POLICY_GID.sub(attributes, svg)


def _prefix_ids(svg: str, prefix: str) -> str:
    """Give every element id in ``svg`` (and every reference to one) ``prefix``."""
    ids = set(re.findall(r'\bid="([^"]+)"', svg))

    def rename(match: re.Match[str]) -> str:
        name = match.group(2)
        return f"{match.group(1)}{prefix}-{name}{match.group(3)}" if name in ids \
            else match.group(0)

    return re.sub(r'(\bid="|href="#|url\(#)([^")]+)([")])', rename, svg)


def _short_coordinates(svg: str) -> str:
    """Cut path coordinates to two decimals (a hundredth of a point, invisible;
    matplotlib writes six): a CDF-heavy page gets a sixth to a third smaller."""
    def shorten(match: re.Match[str]) -> str:
        return 'd="' + re.sub(r"(\.\d{2})\d+", r"\1", match.group(1)) + '"'

    return re.sub(r'\bd="([^"]*)"', shorten, svg)


def svg_of(figure: Figure, prefix: str) -> str:
    """``figure`` as an inline ``<svg>`` element (no XML prolog, no date, coordinates to
    two decimals), its ids prefixed with ``prefix`` (unique on the page) and its policy
    artists tagged."""
    FigureCanvasSVG(figure)
    buffer = io.StringIO()
    with rc_context({"svg.hashsalt": "testbed"}):
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    text = text[text.index("<svg"):]
    return _prefix_ids(_tag_policies(_short_coordinates(text)), prefix)


def plot(svg: str, kind: str, caption: str, view: str | None = None) -> str:
    """A ``<figure class="plot">`` holding ``svg``; ``kind`` names what it shows and
    ``view`` (``linear`` or ``log``) makes it one side of the log-axis toggle."""
    view_attr = f' data-view="{view}"' if view else ""
    return (f'<figure class="plot" data-kind="{html.escape(kind)}"{view_attr}>{svg}'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def log_toggle() -> str:
    """The checkbox that swaps every linear/log figure pair on the page."""
    return ('<div class="toggle"><label><input type="checkbox" id="log-x"> '
            "logarithmic latency axis</label></div>")


def policy_key(policies: Iterable[str]) -> str:
    """A line of colour swatches, one per policy, with the colours of every plot."""
    items = "".join(
        f'<span class="policy" data-policy="{html.escape(p, quote=True)}">'
        f'<span class="swatch" style="background: {policy_colour(p)}"></span>'
        f"{html.escape(p)}</span>" for p in policies)
    return f'<p class="key">{items}</p>'


def table(header: Sequence[str], rows: Iterable[Sequence[str]],
          highlight: Iterable[int] = ()) -> str:
    """An HTML table of text cells (escaped); cells in the ``highlight`` columns that
    hold something other than ``0`` or ``-`` are marked (failures that need a look)."""
    marked = set(highlight)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            hot = i in marked and cell not in ("0", "-", "")
            cls = ' class="nonzero"' if hot else ""
            cells.append(f"<td{cls}>{html.escape(cell)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (f'<div class="scroll"><table><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>")


def heading(text: str, level: int = 2) -> str:
    """A section heading."""
    return f"<h{level}>{html.escape(text)}</h{level}>"


def paragraph(text: str) -> str:
    """A plain paragraph of text."""
    return f"<p>{html.escape(text)}</p>"


def note(text: str) -> str:
    """A highlighted paragraph (fidelity warnings, missing parts)."""
    return f'<p class="note">{html.escape(text)}</p>'


def document(title: str, body: Iterable[str]) -> str:
    """The whole page: ``<head>`` with the CSP, inline CSS, then ``body`` and the JS."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            '<link rel="icon" href="data:,">'
            f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>\n<body>"
            f"<h1>{html.escape(title)}</h1>\n" + "\n".join(body)
            + f"\n<script>{_JS}</script></body></html>\n")
