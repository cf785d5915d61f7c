"""Residual Lab in the browser: ``panel serve apps/`` serves this at http://localhost:5006/apps."""

import panel as pn

from lab.ui.shell import LabShell

pn.extension("tabulator", notifications=True)

LabShell().template().servable(title="Residual Lab")
