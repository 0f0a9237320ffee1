"""The installed `partbuild` console script, run as a user runs it: demo, then one clear line with exit 2."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.process


def test_console_script_is_installed(tmp_path: Path) -> None:
    """The real entry point, as a user runs it."""
    exe = shutil.which("partbuild", path=str(Path(sys.executable).parent))
    assert exe is not None
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    demo = subprocess.run([exe, "demo", "--db", url, "--weeks", "2", "--sites", "1"], capture_output=True, text=True)
    assert demo.returncode == 0, demo.stderr
    bad = subprocess.run([exe, "replay", "--db", url, "--as-of", "x"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
