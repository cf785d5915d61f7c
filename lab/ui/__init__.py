"""Panel pages (Viewer classes) used by ``apps/`` and by notebooks alike; ``extension()`` prepares a notebook.

``lab.ui.pages`` holds one module per page (and the bases they share), ``lab.ui.views`` the live figures the pages
draw into; the shell, serving, notebook integration, the job follower and text escaping sit here.
"""

from lab.extras import require

for _module in ("panel", "holoviews", "param"):  # the ui extra: without it, a message naming it, not a traceback
    require(_module)

from lab.ui.follower import JobFollower  # noqa: E402
from lab.ui.notebook import extension  # noqa: E402
from lab.ui.pages.alignment import AlignmentPage  # noqa: E402
from lab.ui.pages.data import DataPage  # noqa: E402
from lab.ui.pages.diffusion import DiffusionPage  # noqa: E402
from lab.ui.pages.page import Page  # noqa: E402
from lab.ui.pages.playground import PlaygroundPage  # noqa: E402
from lab.ui.pages.rank import RankPage  # noqa: E402
from lab.ui.pages.runs import RunsPage  # noqa: E402
from lab.ui.pages.training import TrainingPage  # noqa: E402
from lab.ui.shell import LabShell, default_pages  # noqa: E402
from lab.ui.views.status import JobStatus  # noqa: E402

__all__ = ["AlignmentPage", "DataPage", "DiffusionPage", "JobFollower", "JobStatus", "LabShell", "Page",
           "PlaygroundPage", "RankPage", "RunsPage", "TrainingPage", "default_pages", "extension"]
