"""Residual Lab in the browser: ``panel serve apps/`` serves this at http://localhost:5006/apps.

The app ships inside the package (:mod:`lab.ui.app`; ``residual-lab serve`` serves it without a checkout).
"""

from lab.ui.app import TITLE, app

app().servable(title=TITLE)
