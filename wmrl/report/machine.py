"""A description of the machine a report or benchmark ran on (stdlib only; torch if importable)."""
from __future__ import annotations

import os
import platform
import sys
from typing import Any



def total_memory_bytes() -> int | None:
    """Physical memory in bytes (``sysconf``), or ``None`` where the platform does not say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def machine_info() -> dict[str, Any]:
    """Platform, CPU model and count, memory (bytes and GiB), Python and torch versions, accelerator.

    ``cpu_count`` is the number of CPUs this process may use (``sched_getaffinity`` where
    available), which on a shared or containerised machine can be less than ``os.cpu_count()``.
    """
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        usable = os.cpu_count() or 0
    cpu_model = platform.processor() or ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = total_memory_bytes()
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": cpu_model,
        "cpu_count": usable,
        "memory_bytes": mem,
        "memory_gib": round(mem / 2**30, 1) if mem else None,
        "python": sys.version.split()[0],
        "torch": None,
        "accelerator": "none",
    }
    try:
        import torch  # noqa: PLC0415 - heavy (torch)

        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info["accelerator"] = f"cuda: {torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}"
    except Exception:  # noqa: BLE001 - torch missing or broken (a CUDA driver error) leaves the fields unknown  # pragma: no cover
        pass
    return info


def code_line(versions: list[dict[str, Any]]) -> str:
    """One line naming the code of a bench's invocations (``bench.json`` ``code_versions``): the one commit, or
    a warning that the results mix several (or uncommitted) versions."""
    if not versions:
        return "not recorded"
    names = list(dict.fromkeys(
        (v.get("commit") or f"wmrl {v.get('wmrl')} (no git commit)") + (" with uncommitted changes" if v.get("dirty")
                                                                        else "")
        for v in versions))
    if len(names) == 1:
        return names[0]
    return f"{len(names)} code versions (the runs are not all from one commit): " + "; ".join(names)


def machine_line(info: dict[str, Any] | None = None) -> str:
    """One human-readable line, e.g.
    ``"Linux-6.1-x86_64, 2 CPUs (AMD EPYC), 23.4 GiB, torch 2.13.0, no accelerator"``."""
    i = info or machine_info()
    acc = "no accelerator" if i.get("accelerator") in (None, "none") else i["accelerator"]
    cpu = f"{i.get('cpu_count')} CPUs" + (f" ({i['cpu_model']})" if i.get("cpu_model") else "")
    mem = f"{i['memory_gib']} GiB RAM" if i.get("memory_gib") else "memory unknown"
    return f"{i.get('platform')}, {cpu}, {mem}, Python {i.get('python')}, torch {i.get('torch')}, {acc}"
