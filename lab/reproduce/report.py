"""The reproduction's report: ``claims.json``, ``report.md`` and a self-contained ``report.html``.

Each starts with what the budget can and cannot show (:data:`lab.reproduce.SCOPE`), and every row carries the numbers
its verdict rests on (:mod:`lab.reproduce.verdict`): the effect in the paper's direction, its 95 % interval, the
one-sided p over the seeds, the floor, and the lab's setting beside the paper's. ``report.html`` carries BokehJS
inline and every figure embedded, so it opens offline (an air-gapped cluster node, an e-mail attachment). Every
text in it is escaped: the report shows data, never markup.
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

from lab.reproduce.claims import PAPERS, Curves, Result
from lab.reproduce.verdict import MOST_SEEDS
from lab.runfolder.writes import atomic_write_bytes, json_text

_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")


def _number(value: float | None) -> str:
    return "—" if value is None or not math.isfinite(value) else f"{value:.3g}"


def _target(target: dict | None) -> str:
    if target is None:
        return "—"
    if not target["rule"]:
        return f"{_number(target['value'])} (note only: {target['source']})"
    head = "" if target["headroom"] is None else f"; headroom {_number(target['headroom'])}"
    return f"{_number(target['value'])} ({target['source']}{head})"


def _numbers(n: dict[str, Any]) -> dict[str, str]:
    """The cells of one test's numbers: effect, interval, raw and Holm p, p against, target and headroom."""
    holm = n.get("p_holm")
    return {"effect": _number(n["effect"]), "95% CI": f"[{_number(n['ci95'][0])}, {_number(n['ci95'][1])}]",
            "p (Holm)": _number(n["p_value"]) + ("" if holm is None else f" ({_number(holm)})"),
            "p against (Holm)": _number(n["p_against"]) + ("" if n.get("p_against_holm") is None
                                                           else f" ({_number(n['p_against_holm'])})"),
            "target": _target(n["target"]), "seeds": str(n["seeds"]), "power (seeds for 0.8)": _power(n)}


def _power(n: dict[str, Any]) -> str:
    """The power cell: the chance the claim holds at this budget if its planned effect is true, and the seeds that
    would give 0.8 (:meth:`lab.reproduce.verdict.Verdict.sized`)."""
    if n.get("power") is None:
        return "—"
    needed = n.get("seeds_needed")
    return f"{n['power']:.2f} ({needed if needed is not None else f'> {MOST_SEEDS:,}'})"


def table_rows(results: list[Result]) -> list[dict[str, str]]:
    """One row per claim, as the Markdown and HTML tables show it, then one row per part of a combined claim (its
    own effect, interval, p and verdict; the claim's row names the part that decided)."""
    rows = []
    for r in results:
        n = r.record()
        floor = n["floor"]
        decided = f" (decided by {n['decided_by']})" if n["decided_by"] and n["parts"] else ""
        rows.append({
            "id": r.claim.id, "where": r.claim.where, "claim": r.claim.statement,
            "paper's number": r.claim.paper_value, "lab": r.lab_value, "verdict": _verdict(r) + decided,
            **_numbers(n),
            "floor": "—" if floor is None else f"{floor['name']}: {_number(floor['value'])}"
                                                + (" (cleared)" if floor["cleared"] else " (not cleared)"),
            "scale (lab / paper)": f"{r.scale or '—'} / {r.claim.paper_scale or '—'}",
            "time": f"{r.seconds:.0f} s" if r.seconds else "—"})
        for part in n["parts"]:
            rows.append({key: "" for key in rows[-1]} | {
                "id": f"  ↳ {r.claim.id}", "claim": part["what"],
                "verdict": f"part (unadjusted): {part['verdict']}",
                **_numbers(part)})
    return rows


def _verdict(r: Result) -> str:
    """The verdict cell: an "inconclusive" claim that this budget could not have decided says so, with its power and
    the seeds it needs, never a bare "inconclusive"."""
    v = r.judged
    if v is None or v.verdict != "inconclusive" or not v.underpowered:
        return r.verdict
    if not math.isfinite(v.power):
        return "inconclusive: power unknown (no effect to plan for)"
    need = f"needs {v.needed} seeds" if v.needed is not None else f"needs more than {MOST_SEEDS:,} seeds"
    return f"inconclusive: underpowered at this budget (power {v.power:.2f}, {need})"


def seeds_words(seeds: int | dict[str, int]) -> str:
    """``3 seed(s)``, or per experiment ``seeds: alignment.fc 10, …`` where experiments differ."""
    if isinstance(seeds, dict):
        return "seeds: " + ", ".join(f"{key} {n}" for key, n in seeds.items())
    return f"{seeds} seed(s)"


def _md_cell(text: str) -> str:
    return html.escape(text, quote=False).replace("|", "\\|").replace("\n", " ")


VERDICT_WORDS = (
    "Verdicts: holds (the effect in the paper's direction, one-sided p < 0.05 over the seeds, Holm-adjusted within the"
    " paper, above its floor) / differs (evidence against the paper: the 95% interval lies entirely below zero, or "
    "below the paper's own effect where the lab measures it in the paper's metric and setting, capped by the headroom "
    "that metric has here; 'p against' is that test's one-sided p, below 0.025, Holm-adjusted) / inconclusive "
    "(neither; where the budget could not have decided it, the row says 'underpowered at this budget' with its power "
    "and the seeds it needs) / not measurable (a precondition failed, or an extra of the lab it needs is not "
    "installed: named) / pipeline only (smoke) / pending (runs not finished: how far) / error (the experiment failed)."
    " A combined claim holds when every part holds and differs when a part differs after Bonferroni over its parts: "
    "its row gives the deciding part's effect and interval, the largest part's p and the smallest part's p against "
    "times the parts, and a row of its own for each part with that part's numbers before any adjustment. Where the "
    "lab's metric or setting is not the paper's, the paper's effect is a note, never a verdict. Values are mean ± sd "
    "over seeds; effects are in the paper's direction.")


def markdown(results: list[Result], meta: dict[str, Any]) -> str:
    """``report.md``: what the budget can show, the table, then each claim's measure, reason and commands."""
    rows = table_rows(results)
    head = list(rows[0]) if rows else []
    lines = [f"# Reproduction ({meta['budget']} budget, {seeds_words(meta['seeds'])}, {meta['seconds']:.0f} s)", "",
             meta.get("scope", ""), "", VERDICT_WORDS, "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_md_cell(row[k]) for k in head) + " |" for row in rows]
    for r in results:
        lines += ["", f"## {_md_cell(r.claim.where)}: {_md_cell(r.claim.statement)}", "",
                  f"- Paper: {_md_cell(PAPERS[r.claim.paper])}; {_md_cell(r.claim.paper_value)} "
                  f"({_md_cell(r.claim.paper_scale or 'setting not given')})",
                  f"- Measured: {_md_cell(r.claim.measure)}", f"- Lab: {_md_cell(r.lab_value)} "
                  f"({_md_cell(r.scale or 'not run at this budget')})",
                  f"- Verdict: **{r.verdict}**: {_md_cell(r.reason)}"]
        if r.commands:
            lines += ["", "```bash", *r.commands, "```"]
    return "\n".join(lines) + "\n"


def _figure(curves: Curves) -> Any:
    from bokeh.models import Legend
    from bokeh.plotting import figure

    fig = figure(title=curves.title, x_axis_label=curves.x_label, y_axis_label=curves.y_label,
                 frame_width=520, frame_height=300, y_axis_type="log" if curves.log_y else "linear",
                 tools="pan,wheel_zoom,box_zoom,reset,save,hover")
    items = []
    for i, (label, (x, y)) in enumerate(curves.series.items()):
        line = fig.line(x, y, line_width=2, color=_COLORS[i % len(_COLORS)])
        items.append((label, [line]))
    fig.add_layout(Legend(items=items, click_policy="hide"), "right")
    return fig


def html_page(results: list[Result], meta: dict[str, Any]) -> str:
    """``report.html``: the table and the figures, with BokehJS inline (opens offline).

    Only the inline code of Bokeh's resources is written, never the files they name: in a process that has loaded
    extensions (Panel's, for one) the resources also list stylesheets on public servers.
    """
    from bokeh.embed import components
    from bokeh.resources import INLINE

    rows = table_rows(results)
    head = list(rows[0]) if rows else []
    figures = [(r, _figure(r.figure)) for r in results if r.figure is not None]
    script, divs = components([f for _, f in figures]) if figures else ("", [])
    esc = html.escape
    inline = ("".join(f"<style>{css}</style>" for css in INLINE.css_raw)
              + "".join(f"<script>{js}</script>" for js in INLINE.js_raw))

    def cell(row: dict[str, str], key: str) -> str:
        verdict = row["verdict"].removeprefix("part (unadjusted): ").split(" (")[0].split(":")[0]  # "holds (decided…)"
        css = verdict.replace(" ", "-") if key == "verdict" else ""
        return f"<td class='{esc(css)}'>{esc(row[key])}</td>"

    table = ("<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>"
             + "".join("<tr>" + "".join(cell(row, k) for k in head) + "</tr>" for row in rows) + "</table>")
    details = "".join(
        f"<h3>{esc(r.claim.where)}: {esc(r.claim.statement)}</h3><p>{esc(PAPERS[r.claim.paper])}. Paper: "
        f"{esc(r.claim.paper_value)} ({esc(r.claim.paper_scale or 'setting not given')}). Measured: "
        f"{esc(r.claim.measure)}. Lab: {esc(r.scale or 'not run at this budget')}.</p><p><b>{esc(r.verdict)}</b>: "
        f"{esc(r.reason)}</p>" + (f"<pre>{esc(chr(10).join(r.commands))}</pre>" if r.commands else "")
        for r in results)
    plots = "".join(f"<h3>{esc(r.claim.where)} ({esc(r.claim.id)})</h3>{div}"
                    for (r, _), div in zip(figures, divs, strict=True))
    style = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:4px 8px;vertical-align:top;text-align:left}"
             ".holds{background:#e3f4e3}.differs{background:#fbe3e3}.not-measurable{background:#eee}"
             ".inconclusive{background:#fdf6dc}.error{background:#f4c7c7}.pipeline-only{background:#eef}"
             ".pending{background:#f0f0ff}"
             "pre{background:#f6f6f6;padding:8px;white-space:pre-wrap}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>Residual Lab reproduction</title>"
            f"<style>{style}</style>{inline}{script}</head><body>"
            f"<h1>Reproduction: {esc(meta['budget'])} budget, {esc(seeds_words(meta['seeds']))}, "
            f"{meta['seconds']:.0f} s</h1>"
            f"<p><b>{esc(meta.get('scope', ''))}</b></p><p>{esc(VERDICT_WORDS)}</p>{table}<h2>Figures</h2>{plots}"
            f"<h2>Claims</h2>{details}</body></html>")


def write_report(results: list[Result], out: Path, meta: dict[str, Any]) -> dict[str, Path]:
    """Write ``claims.json``, ``report.md`` and ``report.html`` into ``out``; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "claims.json", "md": out / "report.md", "html": out / "report.html"}
    record = {**meta, "claims": [r.record() for r in results],
              "figures": {r.claim.id: {"title": r.figure.title, "series": r.figure.series}
                          for r in results if r.figure is not None}}
    atomic_write_bytes(paths["json"], json_text(record, indent=2).encode())
    atomic_write_bytes(paths["md"], markdown(results, meta).encode())
    atomic_write_bytes(paths["html"], html_page(results, meta).encode())
    return paths


