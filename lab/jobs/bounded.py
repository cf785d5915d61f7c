"""Work a page asks of the server, done in a child process under a memory and a time bound, and cancellable.

A page's analysis (the Alignment page's untrained preview, a checkpoint read under the three lenses) may cost any
amount: a link sets its sizes, a form names a file. Run on the server's thread it would freeze every session; run in
a thread it would share the server's memory. A :class:`BoundedTask` runs it in a child of the fork server
(:mod:`lab.jobs.child`: the lab is imported there once, so it starts in a fraction of a second) with

* a **memory bound**: ``RLIMIT_AS`` set to the child's address space at its start plus :attr:`Bounds.memory_mb`, so
  an allocation past it fails in the child (torch and numpy raise) and never grows the server (on Linux; macOS does
  not enforce ``RLIMIT_AS``);
* a **time bound**: :attr:`Bounds.seconds` of wall-clock time, after which the server kills it; the kernel's alarm
  (``SIGALRM``) ends it too, a little later, should the server be gone;
* a **Cancel**: :meth:`BoundedTask.cancel` kills it at once.

A task ended by a bound fails with :class:`TaskFailed` whose message names the bound and its value; any other error
in the child is its type and message, as text. At most :attr:`Bounds.jobs` tasks run per server; one more is refused
(:class:`ServerBusy`), never queued. The bounds come from the environment (:meth:`Bounds.from_env`:
``LAB_PAGE_MEMORY_MB``, ``LAB_PAGE_SECONDS``, ``LAB_PAGE_JOBS``; docs/pages.md names them).

The function must be importable in the child (a module-level function); it is called with the arguments given and
``progress=callback(done, total)``; its return value must pickle.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from lab.jobs.child import _CONTEXT, NICE

__all__ = ["Bounds", "BoundedTask", "ServerBusy", "TaskFailed", "cancel_all"]

MESSAGE_CHARS = 2000
"""The longest error message a child hands back (the rest is cut, and said to be): a page shows it as text."""
PROGRESS_S = 0.1
"""The least time between two progress messages from the child."""
ALARM_MARGIN_S = 5
"""How much after the server's own deadline the child's alarm ends it, should nobody be left to."""


@dataclass(frozen=True)
class Bounds:
    """What one page task may use, and how many may run per server.

    Attributes:
        memory_mb: how far the child's address space may grow beyond its size at the start (MB).
        seconds: wall-clock seconds before it is stopped.
        jobs: tasks running at once on one server (of every session together).
        threads: torch's threads in the child.
    """

    memory_mb: int = 2048
    seconds: float = 300.0
    jobs: int = 2
    threads: int = 1

    def __post_init__(self) -> None:
        if self.memory_mb < 64 or not 1 <= self.seconds <= 86_400 or not 1 <= self.jobs <= 64 or self.threads < 1:
            raise ValueError(f"page task bounds out of range: {self} (memory at least 64 MB, 1 s to a day, 1 to 64 "
                             "jobs, at least 1 thread)")

    @classmethod
    def from_env(cls) -> Bounds:
        """The bounds from ``LAB_PAGE_MEMORY_MB``, ``LAB_PAGE_SECONDS`` and ``LAB_PAGE_JOBS`` (defaults where unset).

        Raises:
            ValueError: a value that is no number, or out of range (the message names the variable).
        """
        values: dict[str, Any] = {}
        for field, name, kind in (("memory_mb", "LAB_PAGE_MEMORY_MB", int), ("seconds", "LAB_PAGE_SECONDS", float),
                                  ("jobs", "LAB_PAGE_JOBS", int)):
            raw = os.environ.get(name, "").strip()
            if raw:
                try:
                    values[field] = kind(raw)
                except ValueError:
                    raise ValueError(f"{name}={raw[:40]!r} is not a number") from None
        return cls(**values)


class TaskFailed(RuntimeError):
    """The task did not return: a bound ended it, it was cancelled, or it raised (the message says which).

    Attributes:
        reason: ``"error"`` (it raised: the message is its type and text), ``"memory"`` or ``"time"`` (a bound
            ended it), ``"cancelled"``, or ``"crash"`` (its process ended without a word).
    """

    def __init__(self, message: str, reason: str = "error") -> None:
        super().__init__(message)
        self.reason = reason


class ServerBusy(RuntimeError):
    """As many tasks as the server allows are running already."""


_slots_lock = threading.Lock()
_running: list[BoundedTask] = []


class BoundedTask:
    """``fn(*args, progress=…, **kwargs)`` in a bounded child process (see the module).

    Args:
        fn: a module-level function.
        args, kwargs: its arguments (they must pickle).
        bounds: the memory and time bounds and the server's task count (default: :meth:`Bounds.from_env`).
        name: the child process's name.
    """

    def __init__(self, fn: Callable[..., Any], *args: Any, bounds: Bounds | None = None, name: str = "lab-task",
                 **kwargs: Any) -> None:
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.bounds = bounds or Bounds.from_env()
        self.name = name
        self.progress: tuple[int, int] = (0, 0)
        self._lock = threading.Lock()
        self._outcome: tuple[str, Any] | None = None  # ("done", value) or ("failed", TaskFailed)
        self._cancelled = False
        self._proc = None
        self._started = time.monotonic()
        self._ended = threading.Event()

    def start(self) -> BoundedTask:
        """Start the child, if the server has room for one more. The child is started by a thread of the server, so
        the caller never waits (on a fork server still importing the lab, say).

        Raises:
            ServerBusy: :attr:`Bounds.jobs` tasks run already.
        """
        with _slots_lock:
            if len(_running) >= self.bounds.jobs:
                raise ServerBusy(f"this server runs {len(_running)} page analyses already (at most "
                                 f"{self.bounds.jobs}, LAB_PAGE_JOBS): try again when one has finished")
            _running.append(self)
        self._started = time.monotonic()
        threading.Thread(target=self._run, name=f"{self.name}-watch", daemon=True).start()
        return self

    @property
    def elapsed(self) -> float:
        """Seconds since :meth:`start`."""
        return time.monotonic() - self._started

    def done(self) -> bool:
        """Whether the task has ended (returned, failed, stopped by a bound or cancelled)."""
        return self._ended.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the task has ended (at most ``timeout`` seconds); returns :meth:`done`."""
        return self._ended.wait(timeout)

    def cancel(self) -> None:
        """Kill the child now; the task fails with "cancelled"."""
        self._cancelled = True
        with self._lock:
            proc = self._proc
        if proc is not None and proc.is_alive():
            with contextlib.suppress(OSError):
                proc.kill()

    def result(self) -> Any:
        """The function's return value.

        Raises:
            TaskFailed: it failed (the message says how), or has not ended yet.
        """
        with self._lock:
            outcome = self._outcome
        if outcome is None:
            raise TaskFailed("the task has not ended yet", "running")
        what, value = outcome
        if what == "failed":
            raise value
        return value

    # -- the server's side ------------------------------------------------------------------------------------
    def _run(self) -> None:
        """Start the child, then watch it (:meth:`_watch`); the slot is free once it has ended."""
        try:
            receive, send = _CONTEXT.Pipe(duplex=False)
            proc = _CONTEXT.Process(target=_child, name=self.name, daemon=True,
                                    args=(self.fn, self.args, self.kwargs, self.bounds, send))
            proc.start()
            send.close()
            with self._lock:
                self._proc = proc
            if self._cancelled:  # cancelled while it started
                proc.kill()
            outcome = self._watch(receive)
        except Exception as err:  # the child could not start (pickling its arguments, no fork server)
            outcome = ("failed", TaskFailed(f"the analysis could not start: {_text(err)}"))
        with self._lock:
            self._outcome = outcome
        self._release()
        self._ended.set()

    def _watch(self, pipe: Connection) -> tuple[str, Any]:
        """Read the child's messages until it ends, kill it at the time bound; returns how it ended."""
        deadline = self._started + self.bounds.seconds
        outcome: tuple[str, Any] | None = None
        timed_out = False
        try:
            while outcome is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    self._proc.kill()
                    break
                if not pipe.poll(min(left, 0.5)):
                    if not self._proc.is_alive() and not pipe.poll(0):
                        break
                    continue
                message = pipe.recv()
                if message[0] == "progress":
                    self.progress = message[1], message[2]
                else:
                    outcome = message
        except (EOFError, OSError):
            pass
        finally:
            pipe.close()
        self._proc.join()
        if outcome is None or outcome[0] != "done":
            outcome = ("failed", self._failure(outcome, timed_out))
        return outcome

    def _failure(self, outcome: tuple[str, Any] | None, timed_out: bool) -> TaskFailed:
        code = self._proc.exitcode
        if self._cancelled:
            return TaskFailed("cancelled", "cancelled")
        if timed_out or code == -signal.SIGALRM:
            return TaskFailed(f"stopped at its time bound of {self.bounds.seconds:g} s (LAB_PAGE_SECONDS): ask for "
                              "less, or run it from the command line", "time")
        if outcome is not None and outcome[0] == "memory":
            return TaskFailed(f"stopped at its memory bound of {self.bounds.memory_mb} MB (LAB_PAGE_MEMORY_MB): "
                              f"{outcome[1]}; ask for less, or run it from the command line", "memory")
        if outcome is not None:
            return TaskFailed(outcome[1])
        how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
        return TaskFailed(f"its process ended with {how} before answering (a library failing at the memory bound of "
                          f"{self.bounds.memory_mb} MB ends it so)", "crash")

    def _release(self) -> None:
        with _slots_lock, contextlib.suppress(ValueError):
            _running.remove(self)


def cancel_all(timeout: float = 10.0) -> None:
    """Cancel every task of this server and wait for them to end (the server is stopping)."""
    with _slots_lock:
        tasks = list(_running)
    for task in tasks:
        task.cancel()
    for task in tasks:
        task.wait(timeout)


# -- the child's side ----------------------------------------------------------------------------------------
def _child(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], bounds: Bounds,
           pipe: Connection) -> None:
    """Bound itself, run ``fn`` and send ``("done", value)``, ``("memory", message)`` or ``("error", message)``."""
    signal.alarm(int(bounds.seconds) + ALARM_MARGIN_S)  # SIGALRM's default action ends the process
    with contextlib.suppress(OSError):
        os.nice(NICE)
    import torch

    torch.set_num_threads(bounds.threads)
    size = _address_space()
    if size is not None:
        limit = size + (bounds.memory_mb << 20)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    last = 0.0

    def progress(done: int, total: int) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= PROGRESS_S or done >= total:
            last = now
            _send(pipe, ("progress", int(done), int(total)))

    try:
        value = fn(*args, progress=progress, **kwargs)
        message: tuple[str, Any] = ("done", value)
    except BaseException as err:  # everything the child meets goes back as text
        message = ("memory" if _out_of_memory(err) else "error", _text(err))
    try:
        _send(pipe, message)
    except MemoryError as err:  # the result itself did not fit
        _send(pipe, ("memory", _text(err)))
    pipe.close()


def _send(pipe: Connection, message: tuple[str, Any]) -> None:
    """Send ``message`` to the server; where it has gone (its end closed: cancelled, or the server stopped), end this
    process at once, quietly: nobody waits for its work."""
    try:
        pipe.send(message)
    except OSError:
        os._exit(1)


def _address_space() -> int | None:
    """This process's virtual size in bytes (``VmSize``; None where ``/proc`` does not say, as on macOS)."""
    with contextlib.suppress(OSError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return None


def _out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is an allocation that failed (numpy's and Python's MemoryError; torch's RuntimeError)."""
    return isinstance(err, MemoryError) or "can't allocate memory" in str(err) or "Cannot allocate memory" in str(err)


def _text(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}"
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS] + f" … ({len(text) - MESSAGE_CHARS} more)"
