"""Panel pages (Viewer classes) used by ``apps/`` and by notebooks alike; ``extension()`` prepares a notebook.

``lab.ui.pages`` holds one module per page (and the bases they share), ``lab.ui.views`` the live figures the pages
draw into; the shell, serving, notebook integration, the job follower and text escaping sit here.
"""

from lab.ui.follower import JobFollower
from lab.ui.notebook import extension
from lab.ui.pages.alignment import AlignmentPage
from lab.ui.pages.data import DataPage
from lab.ui.pages.diffusion import DiffusionPage
from lab.ui.pages.page import Page
from lab.ui.pages.playground import PlaygroundPage
from lab.ui.pages.rank import RankPage
from lab.ui.pages.runs import RunsPage
from lab.ui.pages.training import TrainingPage
from lab.ui.shell import LabShell, default_pages
from lab.ui.views.status import JobStatus

__all__ = ["AlignmentPage", "DataPage", "DiffusionPage", "JobFollower", "JobStatus", "LabShell", "Page",
           "PlaygroundPage", "RankPage", "RunsPage", "TrainingPage", "default_pages", "extension"]
