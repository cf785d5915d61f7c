"""The names inside a run folder: the one table every reader and writer of a run folder uses.

A run folder holds (sub-folders end in ``/``):

==========================  ======================================  ==================================================
entry                       written by                              contents
==========================  ======================================  ==================================================
``config.json``             the runner, first                       resolved config, package versions, git commit,
                                                                    ``resume_changes``
``config.yaml``             :class:`~lab.jobs.process.ProcessJob`   the config its child process trains
``status.json``             recorder, jobs, runner                  state, message, step, epoch, heartbeat (atomic)
``metrics.jsonl``           :class:`~lab.runs.recorder.RunRecorder`  one JSON record per line, appended and flushed
``snapshots/``              publishers                              ``<kind>-<step, 9 digits>.npz`` frames
``checkpoints/``            the recorder                            ``last.pt``, ``best.pt``
``figures/``                the runner (loader engine)              ``reconstruction-<step>.png`` …
``analysis/``               ``lab analyze``, ``lab probe``          ``alignment.json``, ``probe.json``, features
``history/``                a resume                                what it set aside; nothing is ever deleted
``events.out.tfevents.*``   the recorder                            TensorBoard scalars
``process.log``             :class:`~lab.jobs.process.ProcessJob`   the child's stdout and stderr
``lock``                    the runner (rank 0)                     host and pid of the process training the run
``STOP``                    anyone                                  asks the run to stop after its current step
``sweep.json``              :mod:`lab.sweeps` (a sweep's folder)    the members of a sweep, in a folder of run folders
``jobs/``                   :mod:`lab.jobs.submit` (a sweep's       submitit's submissions and each job's logs
                            folder)
==========================  ======================================  ==================================================
"""

from __future__ import annotations

CONFIG = "config.json"
CONFIG_YAML = "config.yaml"
STATUS = "status.json"
METRICS = "metrics.jsonl"
SNAPSHOTS = "snapshots"
CHECKPOINTS = "checkpoints"
FIGURES = "figures"
ANALYSIS = "analysis"
HISTORY = "history"
TFEVENTS_PREFIX = "events.out.tfevents."
PROCESS_LOG = "process.log"
LOCK = "lock"
STOP = "STOP"
SWEEP = "sweep.json"
JOBS = "jobs"

#: The sub-folders a new run folder starts with.
FOLDERS = (SNAPSHOTS, CHECKPOINTS)
#: What a restart keeps in place (everything else moves under ``history/restart-<time>/``).
KEPT_ON_RESTART = (CONFIG, HISTORY, LOCK)
