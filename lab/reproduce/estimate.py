"""GPU-hour estimates of a full-scale plan, from training throughput measured on the device that will run it.

``lab throughput mae --record FILE`` and ``lab throughput uvit --record FILE`` (:mod:`lab.reproduce.throughput`)
append what they measured to a JSON-lines file, one record per measurement: the device
(``torch.cuda.get_device_name``, or ``cpu``), the bench key (``model@image size``) and the engine's images per
second on one device. A planned run that names a bench key (:attr:`~lab.reproduce.full_scale.PlannedRun.bench`) is
estimated as its training images over that rate — the GPU-hours, whatever the number of GPUs it is spread over
(perfect scaling; its wall time is that over its GPUs). Runs no bench measures, or a device with no record, are
"unknown": the plan says so rather than guess.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from lab.runfolder.entries import read_bytes
from lab.runfolder.writes import json_text

__all__ = ["device_kind", "gpu_hours", "read_throughput", "record_throughput"]

MAX_BYTES = 4 << 20


def device_kind() -> str:
    """This machine's first CUDA device's name, else ``cpu``."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def record_throughput(path: str | Path, bench: str, images_per_s: float, *, device: str | None = None,
                      **extra: object) -> dict:
    """Append one measurement to the throughput file ``path`` (made if missing; earlier records kept)."""
    record = {"device": device or device_kind(), "bench": bench, "images_per_s": float(images_per_s),
              "measured": time.strftime("%Y-%m-%d %H:%M:%S"), **extra}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json_text(record) + "\n")
    return record


def read_throughput(path: str | Path | None, device: str) -> dict[str, float]:
    """``bench → images/s`` measured on ``device`` (the latest record of each); empty when the file is missing.

    Raises:
        ValueError: the file exists but a line is not a record.
    """
    if path is None or not Path(path).exists():
        return {}
    rates: dict[str, float] = {}
    for n, line in enumerate(read_bytes(path, MAX_BYTES).decode().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if record["device"] == device and float(record["images_per_s"]) > 0:
                rates[str(record["bench"])] = float(record["images_per_s"])
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{path}, line {n}: not a throughput record ({err})") from None
    return rates


def gpu_hours(images: float, bench: str | None, rates: dict[str, float]) -> float:
    """GPU-hours of training ``images`` images at the rate measured for ``bench`` (NaN when unknown)."""
    rate = rates.get(bench or "")
    return images / rate / 3600 if rate and math.isfinite(images) else math.nan
