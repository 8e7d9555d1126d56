"""Fixtures shared by several test modules."""
from __future__ import annotations

import subprocess

import pytest
import torch


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 200 KiB tmpfs (needs root; skipped where mount fails)."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(mount)],
                      capture_output=True, check=False).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


@pytest.fixture
def one_torch_thread():
    """Tiny models on one torch thread, as the actors and the maze learner run (two threads spin
    against the worker processes on a 2-core machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
