"""The opened run on the Runs page: its header (state, heartbeat, problems), config, checkpoints and the newest
reconstruction picture of an MAE run. Everything in them comes from a run folder and is shown as text (escaped
Markdown, a code block) or as a checked PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import panel as pn

from lab.ui.text import code, code_block, markdown_pane, md
from lab.ui.views.run_views import checkpoints_markdown, format_age

EMPTY = "Select a run in the table to see its curves, status, config and checkpoints."


class RunDetails:
    """The opened run's details.

    Attributes:
        header: the run's name, folder, model, state, heartbeat, message and problems.
        config: its config (YAML); ``checkpoints`` its checkpoints: two cards (``details``).
        picture: the newest reconstruction picture; ``caption`` what it shows (``figure``).
        shown_figure: the picture file on screen (a scan reads only a newer one).
    """

    def __init__(self) -> None:
        self.header = markdown_pane(EMPTY, sizing_mode="stretch_width", margin=(5, 10))
        self.config = markdown_pane("", sizing_mode="stretch_width", max_height=420, styles={"overflow-y": "auto"})
        self.checkpoints = markdown_pane("", sizing_mode="stretch_width")
        self.details = pn.Row(pn.Card(self.config, title="Config", sizing_mode="stretch_width"),
                              pn.Card(self.checkpoints, title="Checkpoints", sizing_mode="stretch_width"),
                              sizing_mode="stretch_width", visible=False)
        # MAE runs: the newest reconstruction picture (originals, masked inputs, reconstructions), embedded
        self.picture = pn.pane.PNG(None, sizing_mode="stretch_width", max_width=900)
        self.caption = markdown_pane("", margin=(0, 10))
        self.figure = pn.Column(self.caption, self.picture, sizing_mode="stretch_width", visible=False)
        self.shown_figure: Path | None = None

    def clear(self) -> None:
        """Show no run."""
        self.details.visible = self.figure.visible = False
        self.header.object = EMPTY
        self.shown_figure = None

    def show(self, name: str, path: Path, summary: dict[str, Any], config_text: str | None,
             checkpoints: list[dict[str, Any]], figure: tuple[int, Path, bytes | None, str | None] | None) -> None:
        """Show the run ``name`` at ``path`` as its last scan read it: ``summary`` (the catalog's), its config's text,
        its checkpoints, and a newer picture ``(step, file, PNG bytes or None, why not shown)`` when there is one."""
        model = md(summary["model"], one_line=True) if summary["model"] else "unknown"
        lines = [f"### {md(name, one_line=True)}",
                 f"{code(path)} · model **{model}** · state **{md(summary['state'], one_line=True)}** · "
                 f"heartbeat {format_age(summary['age_s'])}"]
        if summary["message"]:
            lines.append(f"> {md(summary['message'])}")
        if summary["stale"]:
            lines.append(f"**Stale:** no heartbeat for {format_age(summary['age_s']).removesuffix(' ago')}; the "
                         "process writing this run may have died.")
        if summary["problems"]:
            lines.append("**Problems:** " + "; ".join(md(p) for p in summary["problems"]) + ".")
        if not summary["records"]:
            lines.append("No metrics yet: `metrics.jsonl` holds no complete record.")
        header = "\n\n".join(lines)
        if self.header.object != header:
            self.header.object = header
        config = code_block(config_text, "yaml") if config_text else "No readable config (see the problems above)."
        if self.config.object != config:
            self.config.object = config
        listed = checkpoints_markdown(checkpoints)
        if self.checkpoints.object != listed:
            self.checkpoints.object = listed
        self.details.visible = True
        if figure is not None:  # a newer picture: embedded (nothing fetched), or why it is not shown
            step, self.shown_figure, picture, problem = figure
            self.picture.object = picture
            self.caption.object = (f"**Reconstructions at step {step}**: held-out images, their masked inputs, the "
                                   "reconstructions (visible patches pasted back)" if picture is not None else
                                   f"**Reconstructions at step {step}** not shown: {md(problem)}")
            self.figure.visible = True
