"""The lab shell: a template titled Residual Lab whose sidebar navigation swaps pages in and out.

The page shown lives in the URL (``?page=Runs``); a name that is no page shows the first page and a notice that
quotes the name as text.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import panel as pn
import param
from panel.theme import fast

from lab.jobs.manager import JobManager, get_manager
from lab.ui.pages.alignment import AlignmentPage
from lab.ui.pages.data import DataPage
from lab.ui.pages.diffusion import DiffusionPage
from lab.ui.pages.page import Page
from lab.ui.pages.playground import PlaygroundPage
from lab.ui.pages.rank import RankPage
from lab.ui.pages.runs import RunsPage
from lab.ui.text import alert_pane, clipped, code, markdown_pane, md

PageFactory = Callable[[JobManager], Page]


class Fast(fast.Fast):
    """Panel's Fast design without its web font, which it would fetch from a public server: the lab renders on
    machines with no way out (an air-gapped cluster node), in the system's sans-serif. (It keeps the name
    ``Fast``: Panel finds the design's bundled scripts under the lower-cased class name.)"""

    # a Design declares its files only in the class attribute `_resources` (Panel 1.9 has no public setting for them)
    _resources = {k: v for k, v in fast.Fast._resources.items() if k != "font"}


def default_pages() -> dict[str, PageFactory]:
    """The pages in navigation order; each factory takes the job manager."""
    return {"Playground": lambda manager: PlaygroundPage(manager=manager),
            "Alignment": lambda manager: AlignmentPage(manager=manager),
            "Rank": lambda manager: RankPage(manager=manager),
            "Diffusion": lambda manager: DiffusionPage(manager=manager),
            "Runs": lambda manager: RunsPage(manager=manager),
            "Data": lambda manager: DataPage(manager=manager)}


class LabShell(pn.viewable.Viewer):
    """Navigation + the selected page. Pages are built on first visit and kept, so runs survive navigation.

    Each page is a :class:`~lab.ui.pages.page.Page`: ``controls()`` go to the sidebar and ``views()`` to the main area.

    Attributes:
        notice: below the navigation: a ``?page=`` that names no page.
    """

    page = param.Selector(default=None, objects=[])

    def __init__(self, manager: JobManager | None = None, pages: dict[str, PageFactory] | None = None,
                 **params: Any) -> None:
        self._factories = pages or default_pages()
        self.param.page.objects = list(self._factories)
        self.param.page.check_on_set = True  # a name that is no page is refused (from the URL: see _unknown_page)
        params.setdefault("page", self._linked_page() or next(iter(self._factories)))
        super().__init__(**params)
        self.notice = alert_pane("", alert_type="warning", visible=False, margin=(5, 10))
        self.manager = manager or get_manager()
        self._pages: dict[str, Page] = {}
        self._location: pn.io.location.Location | None = None  # the served page's URL, once templated
        self._synced: Page | None = None  # the page whose settings the URL holds
        self._nav = pn.widgets.RadioButtonGroup.from_param(self.param.page, orientation="vertical",
                                                          color="primary", variant="outline",
                                                          sizing_mode="stretch_width", name="")
        self._controls = pn.Column(sizing_mode="stretch_width")
        self.main = pn.Column(sizing_mode="stretch_both")
        self._show()

    def _linked_page(self) -> str | None:
        """The page a served session's link names (``?page=Alignment``), or None: the shell shows it from the start,
        rather than building the first page only to leave it when the URL is synced (a page costs a model's forward
        pass and its document)."""
        raw = (pn.state.session_args.get("page") or [b""])[0]
        name = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        return name if name in self._factories else None

    def get_page(self, name: str) -> Page:
        """The page called ``name``, built on first use."""
        if name not in self._pages:
            self._pages[name] = self._factories[name](self.manager)
        return self._pages[name]

    @param.depends("page", watch=True)
    def _show(self) -> None:
        self.notice.visible = False
        page = self.get_page(self.page)
        self._controls[:] = [page.controls()]
        self.main[:] = [page.views()]
        self._sync_url(page)

    def _sync_url(self, page: Page) -> None:
        """Keep the shown page's settings, and only its, in the URL query.

        Pages may share a setting's name with different choices (``dataset`` is a toy set on the Playground and
        an image set on the Alignment page), so only one page is synced at a time: leaving a page takes its
        settings out of the query; arriving applies the query to the new page (a refused value is replaced by
        the nearest allowed one, and the page says so) and writes its settings back.
        """
        location = self._location
        if location is None or self._synced is page:
            return
        # the address bar names the new page before the old page's settings leave it: dropping them first would
        # send the browser the old page's name once more, which it could echo back and undo the switch
        location.update_query(page=self.page)
        if self._synced is not None:
            location.unsync(self._synced)
        self._synced = page
        self._clamp_link()  # before the link's sizes reach the page
        location.sync(page, {n: n for n in page.url_parameters}, on_error=page.apply_url)

    def _clamp_link(self, *events: Any) -> None:
        """Lower the sizes of the URL's query above what a link may ask of the shown page (each time the query
        changes: the browser sends the address it was opened with once more when it connects). A size so set
        reaches the page's settings, but its preview is built once, at the next tick, from the lowered value."""
        if self._location is None or self._synced is None:
            return
        lowered = self._synced.clamp_link(self._location.query_params)
        if lowered:
            self._location.update_query(**{n: json.dumps(v) for n, v in lowered.items()})

    def _unknown_page(self, values: dict[str, Any]) -> None:
        """The URL named no page (``?page=nope``): keep the page shown and say so, quoting the name as text."""
        name = values.get("page", "")
        pages = ", ".join(md(p) for p in self._factories)
        self.notice.object = f"There is no page {code(clipped(name))}; showing {md(self.page)}. The pages: {pages}."
        self.notice.visible = True
        if self._location is not None:  # the address bar names the page shown
            self._location.update_query(page=self.page)

    def sidebar(self) -> list[pn.viewable.Viewable]:
        return [markdown_pane("### Pages", margin=(0, 10)), self._nav, self.notice, pn.layout.Divider(),
                self._controls]

    def template(self) -> pn.template.BaseTemplate:
        """The served page: Residual Lab's template; the page selection lives in the URL (``?page=…``)."""
        if pn.state.location is not None:
            self._location = pn.state.location
            self._location.param.watch(self._clamp_link, "search")
            self._location.sync(self, {"page": "page"}, on_error=self._unknown_page)
            self._sync_url(self.get_page(self.page))  # the shown page's settings live in the URL too
        if pn.state.curdoc is not None and pn.state.curdoc.session_context is not None:
            session_id = pn.state.curdoc.session_context.id
            pn.state.on_session_destroyed(lambda ctx: self.manager.release_owner(session_id))
        return pn.template.FastListTemplate(
            title="Residual Lab", sidebar=self.sidebar(), main=[self.main], accent="#0877bd",
            header_background="#183a5a", sidebar_width=330, theme_toggle=False, design=Fast,
            font="system-ui, sans-serif")

    def __panel__(self) -> pn.viewable.Viewable:
        """For notebooks: sidebar and page side by side."""
        return pn.Row(pn.Column(*self.sidebar(), width=330), self.main, sizing_mode="stretch_width")
