"""Jobs and the run store: how training runs are started, watched, stopped, resumed and found again."""

from lab.jobs.job import Job
from lab.jobs.manager import JobManager, ManagerBusy, get_manager, shutdown_manager
from lab.jobs.process import AttachedJob, ProcessJob, StopFile, attach
from lab.jobs.recorder import RunRecorder
from lab.jobs.runner import config_of_run, make_trainer, train_and_evaluate
from lab.jobs.store import FINISHED, STATES, CheckpointError, Run, RunStore, default_runs_dir, sanitize_name
from lab.jobs.sweep_job import SweepJob, group_plan, plan_from_config
from lab.jobs.thread import ThreadJob

__all__ = ["FINISHED", "STATES", "AttachedJob", "CheckpointError", "Job", "JobManager", "ManagerBusy",
           "ProcessJob", "Run", "RunRecorder", "RunStore", "StopFile", "SweepJob", "ThreadJob", "attach",
           "config_of_run", "default_runs_dir", "get_manager", "group_plan", "make_trainer", "plan_from_config",
           "sanitize_name", "shutdown_manager", "train_and_evaluate"]
