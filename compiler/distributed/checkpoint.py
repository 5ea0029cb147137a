"""Checkpoints of a distributed run (compiler/distributed/world.py): weights, step and metadata.

    checkpoint.save(world, "out/run.npz", step, {"emb": emb, ...}, {"lr": 0.3, "losses": [...]})
    step, meta = checkpoint.load(world, "out/run.npz", {"emb": emb, ...})   # fills the arrays

Both are collective: every rank calls them with its own (replicated) arrays.  Rank 0
writes one .npz atomically: a temporary file in the target's directory, flushed and
fsynced, renamed onto the target with os.replace, then the directory fsynced, so a run
killed at any moment leaves the previous checkpoint or the new one, never a torn file.
`load` reads the file on rank 0 only (hosts need not share a filesystem) and broadcasts
its status, step, metadata and every array to the other ranks, in place; a missing or
mismatched checkpoint raises CheckpointError on every rank, not just on rank 0.
"""
from __future__ import annotations

import json
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from compiler.distributed.world import DistributedError, World
from compiler.runtime.arrays import Array

STEP_KEY, META_KEY = "__step__", "__meta__"
# A run's metadata: a JSON object (stored as one JSON string in the .npz).
Meta = dict[str, Any]


class CheckpointError(DistributedError):
    pass


def exists(world: World, path: str | Path) -> bool:
    """Whether rank 0 sees a file at `path` (the same answer on every rank)."""
    flag = np.array([int(world.rank == 0 and Path(path).exists())], np.int32)
    world.all_reduce(flag, "max", what="checkpoint lookup")
    return bool(flag[0])


def save(world: World, path: str | Path, step: int, arrays: dict[str, Array], meta: Meta) -> None:
    if world.rank == 0:
        write(Path(path), step, arrays, meta)
    world.barrier("checkpoint barrier")     # when save returns on any rank, the file is durable


def write(path: Path, step: int, arrays: dict[str, Array], meta: Meta) -> None:
    """The atomic single-process write (rank 0's part of save)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)             # mkstemp's 0600 would make the checkpoint private
        with os.fdopen(fd, "wb") as f:
            members: dict[str, Any] = {**arrays, STEP_KEY: np.int64(step), META_KEY: np.array(json.dumps(meta))}
            np.savez(f, **members)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dirfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)


def read(path: Path, like: dict[str, Array]) -> tuple[int, Meta, dict[str, Array]]:
    """(step, meta, arrays) of a checkpoint whose arrays match `like` in name, dtype and shape."""
    try:
        with np.load(path, allow_pickle=False) as z:
            if STEP_KEY not in z.files or META_KEY not in z.files:
                raise CheckpointError(f"{path} is not a Kina checkpoint (no {STEP_KEY}/{META_KEY})")
            step, meta = int(z[STEP_KEY]), json.loads(str(z[META_KEY]))
            arrays: dict[str, Array] = {}
            for name, a in like.items():
                if name not in z.files:
                    raise CheckpointError(f"{path} has no array {name!r} (it has {', '.join(z.files)})")
                got = z[name]
                if got.shape != a.shape or got.dtype != a.dtype:
                    raise CheckpointError(f"{path}: {name!r} is {got.dtype}{list(got.shape)}, this run "
                                          f"needs {a.dtype}{list(a.shape)}")
                arrays[name] = got
    except FileNotFoundError:
        raise CheckpointError(f"no checkpoint at {path}") from None
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:   # truncated, not an npz, bad JSON
        raise CheckpointError(f"cannot read checkpoint {path}: {e}") from None
    return step, meta, arrays


def load(world: World, path: str | Path, like: dict[str, Array]) -> tuple[int, Meta]:
    """Fill `like` in place from the checkpoint rank 0 reads; returns (step, meta)."""
    header = np.zeros(3, np.int64)              # status (0 ok), step, length of the JSON that follows
    payload = b""
    if world.rank == 0:
        try:
            step, meta, arrays = read(Path(path), like)
            payload = json.dumps(meta).encode()
            header[:] = (0, step, len(payload))
        except CheckpointError as e:
            payload = str(e).encode()
            header[:] = (1, 0, len(payload))
    world.broadcast(header, what="checkpoint header")
    text = np.frombuffer(payload, np.uint8).copy() if world.rank == 0 else np.empty(header[2], np.uint8)
    world.broadcast(text, what="checkpoint metadata")
    if header[0] != 0:
        raise CheckpointError(text.tobytes().decode())
    for name, a in like.items():
        if world.rank == 0:
            a[...] = arrays[name]
        world.broadcast(a, what=f"checkpoint array {name}")
    return int(header[1]), json.loads(text.tobytes().decode())
