"""Fixtures shared by the tests of checkpoints and logs."""
from __future__ import annotations

import subprocess

import pytest


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
