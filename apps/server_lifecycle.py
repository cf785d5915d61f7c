"""Start the process-wide job manager with the server and stop every job with it.

Settings come from the environment (:func:`lab.jobs.manager.settings_from_env`: ``LAB_RUNS_DIR``, ``LAB_MAX_JOBS``,
``LAB_JOB_PROCESSES``). The pages also read ``LAB_DATA_DIRS`` (image folders a page may open) and ``LAB_RUN_DIRS``
(run folders written elsewhere that the Runs page may list); a path typed into a page resolves only inside these
folders.
"""

import torch

from lab.jobs.manager import get_manager, settings_from_env, shutdown_manager


def on_server_loaded(server_context):
    # the toy models' small tensors run fastest on one thread, and a second thread would take the core that
    # serves the pages: a page's untrained snapshot took 5-20 times longer with torch's default of one per core
    torch.set_num_threads(1)
    get_manager(**settings_from_env())


def on_server_unloaded(server_context):
    shutdown_manager()
