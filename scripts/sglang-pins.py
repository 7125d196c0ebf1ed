"""Print src/crashdoc/remedy/pins.py: the versions every SGLang 0.5.x wheel pins (Requires-Dist) for torch,
transformers, flashinfer_python and sgl-kernel/sglang-kernel.

    python scripts/sglang-pins.py .cache/sglang-wheels > src/crashdoc/remedy/pins.py
"""

from __future__ import annotations

import glob
import os
import re
import sys
import zipfile

from packaging.version import Version

_PACKAGES = r"torch|transformers|flashinfer_python|sgl-kernel|sglang-kernel"
HEADER = '''"""The versions each SGLang 0.5.x release pins for the libraries its kernels and model code depend on.

Data, not code: the `Requires-Dist` lines of every SGLang 0.5.x wheel's METADATA (the base requirements, or the
`srt` extra where 0.5.1-0.5.2 kept them). Regenerate with
`python scripts/sglang-pins.py .cache/sglang-wheels > src/crashdoc/remedy/pins.py`.
"""

from __future__ import annotations

'''


FOOTER = """
PINS: dict[str, dict[str, str]] = {
    release: dict(pin.split("==", 1) for pin in requires.split()) for release, requires in _REQUIRES.items()
}
"""


def pins_of(wheel: str) -> dict[str, str]:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return pins_in(z.read(meta).decode("utf-8", "replace"))


def pins_in(text: str) -> dict[str, str]:
    """The pins of one METADATA text (a wheel's, or an installed release's dist-info)."""
    pins: dict[str, str] = {}
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        spec, _, marker = line[len("Requires-Dist:") :].partition(";")
        if "extra ==" in marker and not re.search(r'extra == "(srt|runtime-common)"', marker):
            continue
        m = re.match(rf"\s*({_PACKAGES})(\[[^\]]*\])?\s*==\s*(\S+)", spec)
        if m:
            pins.setdefault(m.group(1), m.group(3))
    return pins


def main(folder: str) -> None:
    rows = {}
    for wheel in glob.glob(os.path.join(folder, "sglang-0.5.*.whl")):
        m = re.match(r"sglang-([^-]+)-", os.path.basename(wheel))
        if m:
            rows[m.group(1)] = pins_of(wheel)
    order = sorted(rows, key=Version)
    sys.stdout.write(HEADER + f'LATEST = "{order[-1]}"\n\n_REQUIRES: dict[str, str] = {{\n')
    for release in order:
        items = " ".join(f"{k}=={v}" for k, v in sorted(rows[release].items()))
        sys.stdout.write(f'    "{release}": "{items}",\n')
    sys.stdout.write("}\n" + FOOTER)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".cache/sglang-wheels")
