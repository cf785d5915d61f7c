"""Jobs whose training runs in another process: a ``python -m lab`` or ``torchrun`` child, or a run to attach to.

Their state lives in the run folder alone, so the same page can watch a child process or a cluster job writing
to a shared folder. Stopping is cooperative first: a ``STOP`` file in the run folder (checked every step by
:class:`~lab.train.stop.StopFile`), then SIGTERM to the process group, then SIGKILL after a grace period.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lab.config import ExperimentConfig, save_config
from lab.jobs.job import Job, exited_status
from lab.runfolder import layout
from lab.runfolder.entries import read_tail
from lab.runfolder.layout import RunState
from lab.runfolder.writes import open_append
from lab.runs.store import FINISHED, Run
from lab.snapshots.snapshot import load_saved
from lab.train.runner import uses_loader
from lab.train.stop import STOP_FILE, request_stop


class AttachedJob(Job):
    """Watch a run that something else started: status, metrics and snapshots from its folder.

    :meth:`stop` asks it to stop by writing the STOP file; pause and resume are not available from outside.
    """

    def __init__(self, run: Run) -> None:
        self.run = run

    def start(self) -> AttachedJob:
        return self

    def pause(self) -> None:
        raise NotImplementedError("an attached run cannot be paused from here; stop it and resume it later")

    def resume(self) -> None:
        raise NotImplementedError("an attached run cannot be resumed from here")

    def stop(self, timeout: float = 5.0) -> None:
        request_stop(self.run)

    def latest(self, kind: str) -> tuple[int, dict[str, np.ndarray]] | None:
        """The newest readable snapshot on disk; its version is the training step it was taken at."""
        return load_saved(self.run, kind)


class ProcessJob(AttachedJob):
    """Run a command (by default ``python -m lab train``) in its own process group, writing into ``run``.

    Args:
        run: the run folder the child writes into.
        command: the full command; default trains ``cfg`` (saved as ``run/config.yaml``) into ``run``.
        cfg: the experiment, for the default command.
        resume: for the default command, continue from the last checkpoint.
        grace_s: seconds between the STOP file and SIGTERM, and between SIGTERM and SIGKILL.
        env: extra environment variables.
    """

    def __init__(self, run: Run, command: Sequence[str] | None = None, *, cfg: ExperimentConfig | None = None,
                 resume: bool = False, grace_s: float = 3.0, env: dict[str, str] | None = None,
                 owner: str | None = None) -> None:
        super().__init__(run)
        if command is None:
            if resume:
                command = [sys.executable, "-m", "lab", "resume", str(run.path), "--no-progress"]
            elif cfg is not None:
                save_config(cfg, run.path / layout.CONFIG_YAML)
                command = [sys.executable, "-m", "lab", "train", str(run.path / layout.CONFIG_YAML),
                           "--run-dir", str(run.path), "--no-progress"]
                if not uses_loader(cfg):  # loader runs record no snapshots
                    command += ["--snapshot-every", "50"]
            else:
                raise ValueError("ProcessJob needs a command or a config")
        self.command = list(command)
        self.grace_s, self.env, self.owner, self.resuming = grace_s, env, owner, resume
        self.proc: subprocess.Popen | None = None

    def start(self) -> ProcessJob:
        if not self.resuming:  # a resumed run is the child's to write once it holds the run's lock
            (self.run.path / STOP_FILE).unlink(missing_ok=True)
            if self.run.read_status().get("state") in ("unknown", *FINISHED):
                self.run.write_status(RunState.QUEUED, "starting process", step=self.run.read_status().get("step", 0))
        env = {**os.environ, "LAB_RUN_DIR": str(self.run.path), "PYTHONUNBUFFERED": "1", **(self.env or {})}
        with os.fdopen(open_append(self.run.path / layout.PROCESS_LOG), "ab") as log:  # the child keeps a copy
            self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True, stdin=subprocess.DEVNULL)
        return self

    def is_alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def status(self) -> dict[str, Any]:
        """status.json; a child that died without finishing (killed, crashed) is reported as ``failed``."""
        code = None if self.proc is None else self.proc.poll()
        if code == 2:  # refused before writing anything: the run is as it was
            return {**self.run.read_status(), "state": RunState.FAILED,
                    "message": "refused, nothing written: " + self._last_log_line(), "returncode": 2}
        return exited_status(self.run, code)

    def _last_log_line(self) -> str:
        with contextlib.suppress(OSError):
            lines = read_tail(self.run.path / layout.PROCESS_LOG).decode(errors="replace").strip().splitlines()
            return lines[-1] if lines else ""
        return ""

    def _signal(self, sig: int) -> None:
        if self.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def stop(self, timeout: float | None = None) -> None:
        """STOP file → SIGTERM → SIGKILL, each after ``grace_s``; returns when the process group is gone."""
        grace = self.grace_s if timeout is None else timeout / 3
        super().stop()
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None:
                self._signal(sig)
            try:
                self.proc.wait(grace)
                break
            except subprocess.TimeoutExpired:
                continue
        self.status()

    def kill(self) -> None:
        """SIGKILL the process group at once (as a crash would)."""
        self._signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()

    def wait(self, timeout: float | None = None, poll: float = 0.05) -> dict[str, Any]:
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout)
        return self.status()


def attach(run_folder: str | Path) -> AttachedJob:
    """Watch a run folder written by another process (a CLI run, a cluster job on a shared disk)."""
    path = Path(run_folder)
    if not path.is_dir():
        raise FileNotFoundError(f"no run folder at {path}")
    return AttachedJob(Run(path))
