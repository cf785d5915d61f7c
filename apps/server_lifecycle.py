"""Start the process-wide job manager with the server and stop every job with it.

Settings: ``LAB_RUNS_DIR`` (runs folder, default ./runs) and ``LAB_MAX_JOBS`` (concurrent jobs, default 2). The
pages also read ``LAB_DATA_DIRS`` (image folders a page may open) and ``LAB_RUN_DIRS`` (run folders written
elsewhere that the Runs page may list); a path typed into a page resolves only inside these folders.
"""

import os

import torch

from lab.jobs.manager import get_manager, shutdown_manager


def on_server_loaded(server_context):
    # the toy models' small tensors run fastest on one thread, and a second thread would take the core that
    # serves the pages: a page's untrained frame took 5-20 times longer with torch's default of one per core
    torch.set_num_threads(1)
    get_manager(runs_dir=os.environ.get("LAB_RUNS_DIR"), max_jobs=int(os.environ.get("LAB_MAX_JOBS", "2")))


def on_server_unloaded(server_context):
    shutdown_manager()
