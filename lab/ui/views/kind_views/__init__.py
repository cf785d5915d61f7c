"""One module per kind of snapshot the lab draws: its view, registered with
:func:`lab.ui.views.replays.register` (and, for a kind new to the lab, its builder and record).

Every module here is imported with :mod:`lab.ui.views.replays`, so a new kind's module registers itself: nothing else
names it.
"""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
