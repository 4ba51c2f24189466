"""An earlier release of clockd in a virtualenv of its own, for the rolling-upgrade drill.

The source is the repository's own history at a given commit (``git archive`` of the
packages and ``pyproject.toml``: the checkout and its worktree list are left alone),
unpacked under a temporary directory.
The virtualenv has no pip and installs nothing: a ``.pth`` file puts the old source
first on ``sys.path`` and the test venv's site-packages after it, for the third-party
libraries (the same versions the old release was tested with, give or take a patch
release). The new release's editable finder lives in a ``.pth`` file of that
site-packages, which Python processes only for site directories, so it does not load
there: ``import clockd`` is the old one. ``bin/clockd`` and ``bin/clockctl`` are the old
release's entry points, read from its ``pyproject.toml``.
"""

from __future__ import annotations

import io
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class ReleaseError(RuntimeError):
    pass


def _archive(commit: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", commit, "pyproject.toml", "clockd", "cli"],
        capture_output=True, timeout=120, check=False,
    )  # fmt: skip


def build_release(commit: str, root: Path) -> Path:
    """Unpack ``commit`` under ``root`` and make its virtualenv; returns its ``bin``.

    A shallow clone (CI's usual checkout) lacks the commit: it is fetched from the
    clone's origin first, once; only if that fails too is it an error."""
    archive = _archive(commit)
    if archive.returncode != 0:
        subprocess.run(
            ["git", "-C", str(REPO), "fetch", "--quiet", "--unshallow"] if (REPO / ".git" / "shallow").exists()
            else ["git", "-C", str(REPO), "fetch", "--quiet", "origin", commit],
            capture_output=True, timeout=300, check=False,
        )  # fmt: skip
        archive = _archive(commit)
    if archive.returncode != 0:
        raise ReleaseError(
            f"git archive {commit} failed (a shallow clone? fetch the history: git fetch --unshallow): "
            + archive.stderr.decode(errors="replace").strip()
        )
    src = root / "src"
    src.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(src, filter="data")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    project = tomllib.loads((src / "pyproject.toml").read_text())
    where = project.get("tool", {}).get("setuptools", {}).get("packages", {}).get("find", {}).get("where", ["."])
    paths = [str((src / w).resolve()) for w in where] + [sysconfig.get_paths()["purelib"]]
    (Path(site) / "clockd-old-release.pth").write_text("\n".join(paths) + "\n")
    for name, target in project["project"]["scripts"].items():
        module, func = target.split(":")
        script = venv / "bin" / name
        script.write_text(f"#!{python}\nimport sys\nfrom {module} import {func}\nsys.exit({func}())\n")
        script.chmod(0o755)
    return venv / "bin"
