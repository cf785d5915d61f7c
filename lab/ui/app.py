"""The lab's app: one :class:`~lab.ui.shell.LabShell` per browser session, at ``/apps``.

``panel serve apps/`` (from the checkout), ``residual-lab serve`` (wherever the package is installed) and the tests'
:func:`~lab.ui.serve.serving_lab` serve the same app: the first through ``apps/main.py``, the others this script.
"""

import panel as pn

import lab.ui as ui
from lab.ui.shell import LabShell

TITLE = "Residual Lab"


def app() -> pn.template.BaseTemplate:
    """A new lab for the browser session being opened."""
    ui.extension("tabulator")
    return LabShell().template()


if __name__.startswith("bokeh_app_"):  # run by the Bokeh server as a session's script
    app().servable(title=TITLE)
