"""Running work: how training starts, is watched, paused, stopped and resumed — in a thread of this process, in a
child process, as a lockstep pair, as a sweep or as cluster jobs (:mod:`lab.jobs.submit`) — and the manager that
bounds how many run at once. What a job writes is a run folder (:mod:`lab.runs`)."""

from lab.jobs.child import ChildJob
from lab.jobs.job import Job
from lab.jobs.manager import JobManager, ManagerBusy, get_manager, shutdown_manager
from lab.jobs.process import AttachedJob, ProcessJob, attach
from lab.jobs.sweep_job import SweepJob, group_plan, plan_from_config
from lab.jobs.thread import ThreadJob
from lab.train.runner import make_trainer, train_and_evaluate

__all__ = ["AttachedJob", "ChildJob", "Job", "JobManager", "ManagerBusy", "ProcessJob", "SweepJob", "ThreadJob",
           "attach", "get_manager", "group_plan", "make_trainer", "plan_from_config",
           "shutdown_manager", "train_and_evaluate"]
