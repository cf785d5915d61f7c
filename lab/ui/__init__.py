"""Panel pages (Viewer classes) used by ``apps/`` and by notebooks alike."""

from lab.ui.data_page import DataPage
from lab.ui.notebook import extension
from lab.ui.playground import PlaygroundPage
from lab.ui.shell import LabShell, default_pages
from lab.ui.status import JobStatus

__all__ = ["DataPage", "JobStatus", "LabShell", "PlaygroundPage", "default_pages", "extension"]
