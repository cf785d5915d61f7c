"""Prepare Panel, HoloViews and Bokeh for the lab's pages, in a notebook and under ``panel serve`` alike.

Everything the browser loads comes from the machine: nothing is fetched from a CDN.

In a Jupyter kernel Panel points the browser at public CDNs (``cdn.bokeh.org``, ``cdn.holoviz.org``) for BokehJS,
Panel's JavaScript and the stylesheets of every component; its ``inline`` mode instead writes megabytes of
JavaScript and CSS into the outputs and re-reads the CSS for each component it renders, which makes a page like the
Playground take many seconds longer to appear (and still sends CDN stylesheet links with later updates). The Jupyter
server that runs the kernel already serves the installed packages' files: Panel's Jupyter server extension (enabled
when Panel is installed) serves Panel's ``dist`` folder under ``/panel_dist/`` and BokehJS under
``/panel-preview/static/``. :func:`extension` points Panel's notebook output at those endpoints: the loader's
script and stylesheet links, the stylesheets of each displayed component, and those of components added or
restyled by later updates. The browser then loads small, cacheable files from the notebook's own server.

This is done by wrapping three functions of :mod:`panel.io.notebook` (the loader's resource bundle, the rendering
of an output, also where Panel and HoloViews import it by name, and the diff of each update), once per kernel and
only inside a Jupyter kernel.

Under ``panel serve`` the Bokeh server serves the same files from its ``/static`` endpoints, and :func:`extension`
only applies the lab's Panel and HoloViews settings.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Iterable
from typing import Any

import bokeh
import holoviews as hv
import holoviews.plotting.renderer as hv_renderer
import panel as pn
import panel.io.notebook as pn_notebook
import panel.viewable as pn_viewable
from bokeh.embed.bundle import URL
from bokeh.models import ImportedStyleSheet
from panel.io.resources import CDN_DIST, LOCAL_DIST

from lab.jobs.manager import get_manager, settings_from_env
from lab.ui.comms import handle_on_main_thread
from lab.ui.notebook_sync import send_only_synced_changes

__all__ = ["DEFAULTS", "extension", "jupyter_base_url", "local_url"]

DEFAULTS: dict[str, Any] = {"notifications": True}
"""Panel settings the lab's pages expect, in a notebook as when served (each page sizes its own components)."""

_BOKEH_CDN = re.compile(r"^https://cdn\.bokeh\.org/bokeh/(?:release|dev)/(?P<name>bokeh(?:-[a-z]+)*)-\d[^/]*?"
                        r"(?P<min>\.min)?\.js$")
_PANEL_PREFIXES = (CDN_DIST, LOCAL_DIST, "./" + LOCAL_DIST, "/" + LOCAL_DIST)
_STYLESHEETS = {"type": ImportedStyleSheet}
_base_url: str | None = None  # where the notebook output was pointed, once it was


def _jupyter_kernel() -> bool:
    """Whether this runs in a kernel of a Jupyter server (not Colab or VS Code, where Panel talks differently)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    elsewhere = "google.colab" in sys.modules or "VSCODE_PID" in os.environ or "VSCODE_CWD" in os.environ
    return shell is not None and hasattr(shell, "kernel") and not elsewhere


def jupyter_base_url() -> str:
    """The base URL of the Jupyter server this kernel belongs to: ``/``, or the prefix JupyterHub set."""
    base = os.environ.get("JUPYTERHUB_SERVICE_PREFIX") or "/"
    return base if base.endswith("/") else base + "/"


def local_url(url: str, base_url: str = "/") -> str:
    """Where a Jupyter server running Panel's server extension serves ``url``.

    Args:
        url: a resource URL as Panel and Bokeh write it: a CDN URL, or Panel's server-relative ``static/`` path.
        base_url: the Jupyter server's base URL.

    Returns:
        The URL on the Jupyter server (with a version query, so the browser may cache it), or ``url`` unchanged
        when the installed packages do not hold that file.
    """
    path = url.split("?", 1)[0]
    for prefix in _PANEL_PREFIXES:
        if path.startswith(prefix):
            return f"{base_url}panel_dist/{path[len(prefix):]}?v={pn.__version__}"
    found = _BOKEH_CDN.match(path)
    if found:
        return f"{base_url}panel-preview/static/js/{found['name']}{found['min'] or ''}.js?v={bokeh.__version__}"
    return url


def _localize(sheets: Iterable[ImportedStyleSheet], base_url: str) -> None:
    for sheet in sheets:
        url = local_url(sheet.url, base_url)
        if url != sheet.url:
            sheet.url = url


def _serve_from_jupyter(base_url: str) -> None:
    """Point Panel's notebook output at the Jupyter server's copies of the installed files (once per kernel)."""
    global _base_url
    if _base_url is not None:
        return
    bundle_resources, render_model, diff = pn_notebook.bundle_resources, pn_notebook.render_model, pn_notebook.diff

    @functools.wraps(bundle_resources)
    def local_bundle(*args: Any, **kwargs: Any) -> Any:
        bundle = bundle_resources(*args, **kwargs)
        bundle.js_files = [URL(local_url(str(u.url), base_url)) for u in bundle.js_files]
        bundle.css_files = [URL(local_url(str(u.url), base_url)) for u in bundle.css_files]
        return bundle

    @functools.wraps(render_model)
    def local_render(model: Any, *args: Any, **kwargs: Any) -> Any:
        _localize(model.select(_STYLESHEETS), base_url)
        return render_model(model, *args, **kwargs)

    @functools.wraps(diff)
    def local_diff(doc: Any, *args: Any, **kwargs: Any) -> Any:
        _localize(doc.select(_STYLESHEETS), base_url)  # stylesheets that updates attached since the last push
        return diff(doc, *args, **kwargs)

    pn_notebook.bundle_resources, pn_notebook.diff = local_bundle, local_diff
    # render_model is also imported by name where outputs are rendered: Panel's viewables and HoloViews' renderer
    for module in (pn_notebook, pn_viewable, hv_renderer):
        if getattr(module, "render_model", None) is render_model:
            module.render_model = local_render
    _base_url = base_url


def extension(*args: str, base_url: str | None = None, **kwargs: Any) -> None:
    """Load Panel (with Tabulator, which the Runs page needs, and the extensions ``args``) and HoloViews' Bokeh
    backend for the lab.

    In a Jupyter kernel every JavaScript and CSS file then comes from the Jupyter server (see the module
    docstring), messages from the browser are handled on the kernel's main thread (:mod:`lab.ui.comms`) and carry
    only the browser's own changes (:mod:`lab.ui.notebook_sync`), the
    pages' runs train in child processes as served pages' do (:func:`lab.jobs.manager.settings_from_env`), and the
    lab's runs, snapshots and node maps display richly (:mod:`lab.ui.display`); elsewhere
    (``panel serve``, scripts) this only configures Panel and HoloViews.

    Args:
        *args: Panel extension names, as for ``pn.extension``.
        base_url: the Jupyter server's base URL (default: :func:`jupyter_base_url`); pass it when the server was
            started with another ``--ServerApp.base_url``.
        **kwargs: Panel settings, as for ``pn.extension``, over the lab's :data:`DEFAULTS`.
    """
    in_kernel = _jupyter_kernel()
    # an earlier pn.extension or hv.extension in this kernel published a loader pointing elsewhere (a CDN); Panel
    # and HoloViews record that only in their extensions' private `_loaded` flag (no public accessor in Panel 1.9)
    loaded_elsewhere = in_kernel and _base_url is None and (
        pn.extension._loaded or getattr(hv.extension, "_loaded", False))
    if in_kernel:
        from IPython import get_ipython

        handle_on_main_thread(get_ipython().kernel.io_loop)  # JupyterLab may send clicks to other threads
        _serve_from_jupyter(base_url or jupyter_base_url())
        send_only_synced_changes()  # the browser stops echoing each of the kernel's changes back to it
        get_manager(**settings_from_env())  # the cells' pages train in child processes, as served pages do
    # Panel first: its loader then carries every extension the first output needs (notifications included)
    pn.extension(*dict.fromkeys(("tabulator", *args)), **{**DEFAULTS, **kwargs})  # the Runs page's table
    hv.extension("bokeh", logo=False)
    if loaded_elsewhere:  # Panel would only reload its extensions: load everything again, from here
        pn_notebook.load_notebook(pn.config.inline, reloading=False)
    if in_kernel:  # runs, snapshots and node maps display as a table and their view
        from lab.ui.display import register

        register(get_ipython())
