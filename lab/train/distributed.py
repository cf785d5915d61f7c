"""Data-parallel processes as ``torchrun`` starts them: who am I, which device, and the few collectives the
loader engine needs.

``torchrun --nproc_per_node=N [--nnodes M …] -m lab train CONFIG`` sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and
the rendezvous variables; a plain ``python -m lab train`` sets none and is a world of one, with no process group.
The backend is NCCL when the processes drive CUDA devices and gloo on CPU.
"""

from __future__ import annotations

import datetime
import gc
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class World:
    """This process's place among the data-parallel processes.

    Attributes:
        rank: global rank (0 writes the run folder).
        size: number of processes.
        local_rank: rank on this machine (selects the CUDA device).
        device: the device this process trains on.
    """

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1


def launched_by_torchrun() -> bool:
    """Whether ``torchrun`` (or another launcher setting ``WORLD_SIZE``) started this process."""
    return "WORLD_SIZE" in os.environ and "RANK" in os.environ


def init_world(device: str = "auto", timeout_s: float = 1800.0) -> World:
    """Join the process group torchrun describes (or be a world of one) and pick this process's device.

    Args:
        device: ``auto`` (the local rank's CUDA device when present, else CPU), ``cpu`` or ``cuda``.
        timeout_s: collective timeout; generous, since rank 0 alone runs evaluations others wait for.
    """
    cuda = torch.cuda.is_available() and device != "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device {device!r} asked for, but CUDA is not available on this machine")
    if not launched_by_torchrun():
        dev = torch.device(device if device not in ("auto", "cuda") else ("cuda" if cuda else "cpu"))
        return World(device=dev)
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", 0))
    dev = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    if size > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo", timeout=datetime.timedelta(seconds=timeout_s),
                                device_id=dev if cuda else None)
    return World(rank, size, local, dev)


def close_world(world: World) -> None:
    """Leave the process group (after the last collective).

    What still refers to the group — a finished trainer's DDP reducer, held in a reference cycle with its callbacks,
    and the gloo work of its last gradient all-reduce — is collected first: left to the interpreter's finalisation,
    gloo's worker threads release tensors after Python is gone and the process aborts ("terminate called without an
    active exception", exit -6) although training completed.
    """
    if world.distributed and dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


def broadcast(world: World, obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank (a picklable object: a path, a flag)."""
    if not world.distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def any_rank(world: World, flag: bool) -> bool:
    """True on every rank when ``flag`` is true on some rank (a stop request seen by one process stops all at the
    same step, which data-parallel training needs)."""
    if not world.distributed:
        return flag
    t = torch.tensor([float(flag)], device=world.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def sum_all(world: World, values: list[float]) -> list[float]:
    """Element-wise sum of ``values`` over ranks (counts and sums for exact global means)."""
    if not world.distributed:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=world.device)
    dist.all_reduce(t)
    return t.tolist()
