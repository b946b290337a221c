"""Small user models for the CLI's --module option (tests/test_cli.py)."""

import torch.nn as nn


def factory() -> nn.Module:
    """A two-layer MLP taking (batch, 16) float inputs."""
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8))


def failing_factory() -> nn.Module:
    raise RuntimeError("this factory always fails")


def not_a_module() -> int:
    return 3


def exiting_factory() -> nn.Module:
    raise SystemExit(3)
