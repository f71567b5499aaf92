"""Data-parallel training with ``torch.distributed``: one process per device, launched by ``torchrun``.

``torchrun --nproc_per_node=N $(which dotformer) train ...`` starts N copies of the same command with RANK,
WORLD_SIZE and LOCAL_RANK in their environment. Each process reads its own shard of every epoch's batches
(``BatchSampler(rank=..., world_size=...)``), and DistributedDataParallel averages the gradients after every
backward pass (gloo on CPU, nccl on CUDA). Only rank 0 writes checkpoints, logs and the progress bar.

Loss normalisation: every rank divides its summed loss by the number of target tokens in the GLOBAL batch (all ranks,
all accumulated micro-batches) and multiplies by the world size, which DDP's averaging divides out again. So the
gradient equals that of one process seeing the whole batch, whatever the token counts per rank.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from dotformer.errors import ConfigError


@dataclass(frozen=True)
class DistContext:
    """Where this process stands in a (possibly single-process) run.

    Attributes:
        rank: this process's index in [0, world_size).
        world_size: number of processes (1 without torchrun).
        local_rank: index on this machine (selects the CUDA device).
        device: the device this process trains on.
        initialized_here: True when :func:`setup_distributed` created the process group (and should destroy it).
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    initialized_here: bool = False

    @property
    def is_main(self) -> bool:
        """True on rank 0, the process that writes files and prints."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """True when gradients and metrics must be reduced across processes."""
        return self.world_size > 1


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """The torch device for a TrainConfig.device name ("auto", "cpu", "cuda", "cuda:1", "mps", ...).

    Raises:
        ConfigError: CUDA asked for but not available, or an unknown device name.
    """
    if name == "auto":
        return torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"unknown device {name!r} (use auto, cpu, cuda or cuda:N)") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device {name!r} asked for, but CUDA is not available on this machine")
        if device.index is None:
            device = torch.device("cuda", local_rank)
    return device


def setup_distributed(device_name: str = "auto") -> DistContext:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1), else describe a single process.

    A process group that already exists (e.g. created by a test) is used as it is.

    Returns:
        :class:`DistContext` with rank, world size and this process's device.

    Raises:
        ConfigError: a bad device name, or a CUDA device index beyond the visible GPUs.
    """
    if dist.is_available() and dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
        local = int(os.environ.get("LOCAL_RANK", rank))
        return DistContext(rank, world, local, resolve_device(device_name, local), initialized_here=False)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistContext(device=resolve_device(device_name, 0))
    rank = int(os.environ["RANK"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = resolve_device(device_name, local)
    if device.type == "cuda":
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"LOCAL_RANK={local} but only {torch.cuda.device_count()} CUDA devices are visible")
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend=backend)
    return DistContext(rank, world, local, device, initialized_here=True)


def teardown_distributed(context: DistContext) -> None:
    """Destroy the process group if :func:`setup_distributed` created it."""
    if context.initialized_here and dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(values: torch.Tensor, context: DistContext) -> torch.Tensor:
    """Sum a tensor over all processes (returns it unchanged in a single process).

    Shape: any; float64 recommended for token counts and loss sums. The tensor is moved to the process's device for
    the collective (nccl needs CUDA tensors) and returned there.
    """
    if not context.distributed:
        return values
    values = values.to(context.device)
    dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def all_gather_tensor(value: torch.Tensor, context: DistContext) -> list[torch.Tensor]:
    """Gather one same-shaped tensor from every process (e.g. the RNG states); [value] in a single process."""
    if not context.distributed:
        return [value]
    local = value.to(context.device)
    out = [torch.empty_like(local) for _ in range(context.world_size)]
    dist.all_gather(out, local)
    return [t.cpu() for t in out]


def barrier(context: DistContext) -> None:
    """Wait for every process (no-op in a single process)."""
    if context.distributed:
        dist.barrier()


def check_shared_file(path: Path, flag: str, context: DistContext) -> None:
    """Check that every rank reads the file rank 0 has just written at ``path`` (a directory given by ``flag`` that
    all machines share); collective: call on every rank after rank 0 wrote and a barrier.

    Raises:
        ConfigError: on every rank, when some rank finds no such file or another one (each machine given its own
            directory): one line naming the ranks and the flag.
    """
    if not context.distributed:
        return
    try:
        digest = int.from_bytes(hashlib.sha256(path.read_bytes()).digest()[:7], "big")  # fits an int64
    except OSError:
        digest = -1
    digests = all_gather_tensor(torch.tensor([digest], dtype=torch.int64), context)
    others = [rank for rank, value in enumerate(digests) if int(value.item()) != int(digests[0].item())]
    if others:
        ranks = ", ".join(str(rank) for rank in others)
        raise ConfigError(
            f"{flag} {path.parent} must be the same shared directory on every machine: rank{'s' * (len(others) > 1)} "
            f"{ranks} cannot read the {path.name} that rank 0 wrote there"
        )
