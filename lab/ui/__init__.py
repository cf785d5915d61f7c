"""Panel pages (Viewer classes) used by ``apps/`` and by notebooks alike; ``extension()`` prepares a notebook."""

from lab.ui.alignment_page import AlignmentPage
from lab.ui.data_page import DataPage
from lab.ui.follower import JobFollower
from lab.ui.notebook import extension
from lab.ui.page import Page
from lab.ui.playground import PlaygroundPage
from lab.ui.rank_page import RankPage
from lab.ui.runs_page import RunsPage
from lab.ui.shell import LabShell, default_pages
from lab.ui.status import JobStatus

__all__ = ["AlignmentPage", "DataPage", "JobFollower", "JobStatus", "LabShell", "Page", "PlaygroundPage",
           "RankPage", "RunsPage", "default_pages", "extension"]
