"""In a notebook, the browser sends the kernel only the changes the kernel does not already have.

Under ``panel serve`` BokehJS sends the server a document change only when it is marked ``sync``: the changes it
applies from the server's own patches are marked ``sync: false`` and go nowhere. In a notebook, Panel's
``CommManager`` (its browser side of the kernel's comm, Panel 1.9) sends every document change to the kernel,
those included: each change the kernel pushes comes straight back to it. For a live view that is each frame twice
over the comm — the node grid's pixels and hover ranges re-encoded in the browser, carried through the
Jupyter server and decoded and re-applied by the kernel (where Panel also walks the whole document once per data
event) — and each streamed point of a curve appended a second time to the kernel's copy of its source. With the
Playground training in a cell this was most of the kernel's work and held the browser to half the frame rate of
the served page (``bench/playground_jupyterlab.py``).

:func:`send_only_synced_changes` adds to the notebook loader (the JavaScript Panel's ``extension`` publishes, run once
Panel's models are loaded) a filter on ``CommManager``'s change listener with BokehJS's own rule: a change applied
from the kernel's patch (``sync: false``) is not sent back; a change the browser makes (a click, a view's layout, a
clock's answer) is sent as before.
"""

from __future__ import annotations

import functools
from typing import Any

import panel.io.notebook as pn_notebook

__all__ = ["SYNCED_CHANGES_JS", "send_only_synced_changes"]

SYNCED_CHANGES_JS = """
const CommManager = Bokeh.Panel == null ? null : Bokeh.Panel.CommManager;
if (CommManager != null && !CommManager.prototype._lab_synced_only) {
  // BokehJS's rule for a server session: a change applied from the other side's patch is marked sync: false
  const synced = (event) => event.sync !== false && (event.events == null || event.events.some(synced));
  const send = CommManager.prototype._document_changed;
  CommManager.prototype._document_changed = function (event) {
    if (synced(event)) send.call(this, event);
  };
  CommManager.prototype._lab_synced_only = true;
}
"""
"""Run by the notebook loader after Panel's models have loaded (``Bokeh`` is BokehJS): wrap ``CommManager``'s
change listener once per page."""

_installed = False


def send_only_synced_changes() -> None:
    """Make the notebook loader Panel publishes from now on install :data:`SYNCED_CHANGES_JS` (once per kernel)."""
    global _installed
    if _installed:
        return
    bundle_resources = pn_notebook.bundle_resources

    @functools.wraps(bundle_resources)
    def with_filter(*args: Any, **kwargs: Any) -> Any:
        bundle = bundle_resources(*args, **kwargs)
        bundle.js_raw = [*bundle.js_raw, SYNCED_CHANGES_JS]
        return bundle

    pn_notebook.bundle_resources = with_filter
    _installed = True
