"""Kina libraries on N processes, through torch.distributed (never a home-made transport).

Takes a launch environment (torchrun's RANK, WORLD_SIZE, ...) and a Kina source; gives a
World with collectives on NumPy buffers (all_reduce, all_gather, broadcast, barrier), one
library built once per host and shared by its ranks (build_shared), and atomic
checkpoints.  PyTorch is optional: without it these raise TorchUnavailable with the
install hint.  docs/distributed.md shows the runs.

Public entry points (other packages import only these):
  Launch.from_env(), connect(launch) -> World, build_shared(source, name, opt_level),
  cache_root (where build_shared keeps libraries), shard_range, pin_single_thread,
  require_torch, inject_fault (KINA_DIST_FAULT, the fault-injection tests), fail;
  DistributedError and its kinds: TorchUnavailable, LaunchError, ShardingError, PeerLost,
  CollectiveError; the exit codes EXIT_PEER_LOST and EXIT_USAGE
  checkpoint   save / load / exists (collective; rank 0 writes the .npz atomically)
"""
from compiler.distributed.world import (
    EXIT_PEER_LOST,
    EXIT_USAGE,
    CollectiveError,
    DistributedError,
    Launch,
    LaunchError,
    PeerLost,
    ShardingError,
    TorchUnavailable,
    World,
    build_shared,
    cache_root,
    connect,
    fail,
    inject_fault,
    pin_single_thread,
    require_torch,
    shard_range,
)

__all__ = ["EXIT_PEER_LOST", "EXIT_USAGE", "CollectiveError", "DistributedError", "Launch", "LaunchError", "PeerLost",
           "ShardingError", "TorchUnavailable", "World", "build_shared", "cache_root", "checkpoint", "connect", "fail",
           "inject_fault", "pin_single_thread", "require_torch", "shard_range"]
