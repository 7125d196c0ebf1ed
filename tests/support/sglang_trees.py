"""SGLang installs on disk for the release-finder tests, unpacked from SGLang's real wheel (never imported).

`.cache/wheels/sglang-0.5.23-*.whl` is what `scripts/fetch-sglang.sh` downloads for `make test`;
$CRASHDOC_SGLANG_WHEEL names another. Tests that need it skip when it is absent.
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# the files that say which release a tree is, and one that holds real flag checks
VERSION_FILES = ("sglang/__init__.py", "sglang/version.py", "sglang/_version.py")
SERVER_ARGS = "sglang/srt/server_args.py"


def wheel() -> Path:
    named = os.environ.get("CRASHDOC_SGLANG_WHEEL")
    found = [named] if named else sorted(glob.glob(str(ROOT / ".cache/wheels/sglang-0.5.23-*.whl")))
    if not found or not Path(found[-1]).is_file():
        pytest.skip("SGLang's wheel is not in .cache/wheels (scripts/fetch-sglang.sh downloads it)")
    return Path(found[-1])


def wheel_version(path: Path) -> str:
    return path.name.split("-")[1]


def unpack(site: Path, members: Sequence[str] = VERSION_FILES, *, dist_info: bool = True) -> str:
    """Unpack `members` of the real wheel (and its dist-info METADATA) into `site`; returns its release."""
    path = wheel()
    release = wheel_version(path)
    site.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
        wanted = [m for m in members if m in names]
        if dist_info:
            wanted.append(f"sglang-{release}.dist-info/METADATA")
        zf.extractall(site, wanted)
    return release


def set_release(site: Path, release: str) -> None:
    """Edit an unpacked install to say it is `release`: the dist-info (renamed, METADATA) and `_version.py`."""
    for info in site.glob("sglang-*.dist-info"):
        meta = info / "METADATA"
        if meta.exists():
            meta.write_text(re.sub(r"(?m)^Version: .*$", f"Version: {release}", meta.read_text()))
        info.rename(site / f"sglang-{release}.dist-info")
    version = site / "sglang" / "_version.py"
    if version.exists():
        text = re.sub(r"(?m)^__version__ = version = .*$", f"__version__ = version = {release!r}", version.read_text())
        version.write_text(text)


def make_venv(root: Path, python: str = "3.11") -> Path:
    """A venv's layout (pyvenv.cfg, bin/python linked to this machine's Python); returns its site-packages."""
    (root / "bin").mkdir(parents=True, exist_ok=True)
    home = os.path.dirname(os.path.realpath(sys.executable))
    (root / "pyvenv.cfg").write_text(f"home = {home}\ninclude-system-site-packages = false\nversion = {python}.7\n")
    link = root / "bin" / "python"
    if not link.exists():
        link.symlink_to(os.path.realpath(sys.executable))
    (root / "bin" / "python3").symlink_to("python")
    site = root / "lib" / f"python{python}" / "site-packages"
    site.mkdir(parents=True)
    return site


def make_editable(site: Path, checkout: Path, release: str) -> None:
    """What `pip install -e checkout/python` leaves in site-packages: a dist-info with direct_url.json."""
    info = site / f"sglang-{release}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {release}\n\nSGLang\n")
    url = {"url": (checkout / "python").as_uri(), "dir_info": {"editable": True}}
    (info / "direct_url.json").write_text(json.dumps(url))
    (site / f"__editable__.sglang-{release}.pth").write_text(str(checkout / "python") + "\n")
