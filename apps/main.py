"""Residual Lab in the browser: ``panel serve apps/`` serves this at http://localhost:5006/apps."""

import lab.ui as ui
from lab.ui.shell import LabShell

ui.extension("tabulator")

LabShell().template().servable(title="Residual Lab")
