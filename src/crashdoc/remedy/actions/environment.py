"""Missing packages and library versions: the pip line SGLang's message names, the versions its wheels pin."""

from __future__ import annotations

import re
from collections.abc import Mapping

from crashdoc.remedy.actions.common import Action, Inputs
from crashdoc.remedy.pins import LATEST, PINS

_PIP_LINE = re.compile(r"""pip install ((?:--?[\w-]+ )*["']?[\w.\[\],<>=!~-]+["']?(?: --[\w-]+)*)""")
_MODULE_PACKAGES = {  # module -> the package SGLang's requirements or messages name for it
    "flashinfer": "flashinfer_python",
    "sgl_kernel": "sglang-kernel",
    "deep_gemm": "sgl-deep-gemm",
    "mooncake": "mooncake-transfer-engine",
    "flash_mla": "sgl-flash-mla",
    "deep_ep": "sgl-deep-ep",
    "xgrammar": "xgrammar",
    "triton": "triton",
    "yaml": "pyyaml",
    "zmq": "pyzmq",
    "transformers": "transformers",
    "torch": "torch",
}


def missing_package_action(inputs: Inputs, captures: Mapping[str, str]) -> Action | None:
    """The `pip install` line: the package SGLang's message names, else the package known to provide the
    missing module (with the version SGLang pins), else SGLang's instructions URL."""
    message = inputs.finding.message
    m = _PIP_LINE.search(message)
    name = captures.get("module") or captures.get("package") or ""
    top = name.split(".")[0]
    if m:
        package = m.group(1).strip().rstrip(".`'\"")
        named = "the package SGLang's message names"
    elif top.startswith("sglang"):
        return Action(
            summary=f"the SGLang install is incomplete (`{name}` is missing): reinstall SGLang for the unit",
            changes=[],
            why=[f"`{name}` is part of SGLang itself, so the installed SGLang is damaged or mixed with a source tree."],
        )
    elif top.lower() in _MODULE_PACKAGES:
        package = _MODULE_PACKAGES[top.lower()]
        named = f"the package that provides `{top}`"
    elif captures.get("url"):
        return Action(
            summary=f"install {name} into the unit's environment as SGLang says ({captures['url']})",
            changes=[],
            why=[f"SGLang names no pip package for {name}; its message points at {captures['url']}."],
        )
    elif top:
        package = top
        named = f"the package named like the module `{top}` (check its real name on PyPI)"
    else:
        return None
    base = re.split(r"[\[<>=!~ ]", package.strip("'\""), maxsplit=1)[0]
    release, known = pin_release(inputs.release)
    pin = _pin(base, release)
    certain = known and pin
    line = f"pip install {package}" if not certain or "=" in package else f"pip install '{base}=={pin}'"
    why = [
        f"Install {named} into the interpreter the unit runs (the python of its ExecStart, or the container "
        f"image): `{line}`."
    ]
    if pin and known:
        why.append(f"SGLang {release} pins {base}=={pin} (its wheel's Requires-Dist).")
    elif pin:
        why.append(f"At the version the unit's SGLang pins: {unknown_release(release)}, `pip install '{base}=={pin}'`.")
    return Action(summary=f"install the missing package: `{line}` in the unit's environment", changes=[], why=why)


def pin_release(release: str) -> tuple[str, bool]:
    """The release whose pins to use, and whether it is the unit's own (else the newest, said as a condition)."""
    return (release, True) if release in PINS else (LATEST, False)


def unknown_release(assumed: str) -> str:
    return f"if the unit runs SGLang {assumed} (its release is not known here: `pip show sglang` says it)"


def _pin(package: str, release: str = LATEST) -> str | None:
    found = pinned(package)
    return dict(found).get(release) if found else None


def pinned(package: str) -> list[tuple[str, str]]:
    """(SGLang release, pinned version) for every 0.5.x release that pins `package`."""
    names = {package, package.replace("-", "_"), package.replace("_", "-")}
    if package.replace("_", "-") in ("sgl-kernel", "sglang-kernel"):
        names |= {"sgl-kernel", "sglang-kernel"}
    out = []
    for release, pins in PINS.items():
        for name in names:
            if name in pins:
                out.append((release, pins[name]))
                break
    return out


_INSTALLED = re.compile(
    r"\b(?P<pkg>transformers|torch|flashinfer(?:[_-]python)?|sgl[_-]kernel|sglang[_-]kernel)\b"
    r"[ =]+(?:version )?(?P<ver>\d+\.\d+[\w.+-]*)"
)


_TORCH_SYMBOL = re.compile(r"_ZN?K?(?:5torch|3c10|2at)")  # mangled C++ names in PyTorch's namespaces


def version_action(inputs: Inputs, captures: Mapping[str, str]) -> Action | None:
    """Which package, which version SGLang pins, and which releases pin what is installed."""
    package = captures.get("pkg") or captures.get("package") or ""
    installed = captures.get("installed", "")
    text = inputs.finding.message
    if not package:
        m = _INSTALLED.search(text)
        if m:
            package, installed = m["pkg"], installed or m["ver"]
        elif "transformers" in text or any("transformers" in f.file for f in inputs.frames()):
            package = "transformers"
        else:
            return None
    package = {"flashinfer": "flashinfer_python", "flashinfer-python": "flashinfer_python"}.get(package, package)
    if package.replace("_", "-") in ("sgl-kernel", "sglang-kernel"):
        package = "sglang-kernel"
    releases = pinned(package)
    if not releases:
        return None
    release, known = pin_release(inputs.release)
    latest = dict(releases).get(release) or releases[-1][1]
    name = package
    if known:
        why = [f"SGLang {release} pins {name}=={latest} (its wheel's Requires-Dist)."]
    else:
        why = [f"SGLang {release} pins {name}=={latest}; {unknown_release(release)[3:]}, that is the version to match."]
    if installed:
        same = [r for r, v in releases if v == installed]
        if same:
            why.append(f"{name} {installed} is what SGLang {_span(same)} pin: keep it only with that SGLang.")
        else:
            why.append(f"No SGLang 0.5.x release pins {name} {installed}.")
    torch = PINS.get(release, {}).get("torch")
    symbol = captures.get("symbol", "")
    together = f" 'torch=={torch}'" if _TORCH_SYMBOL.match(symbol) and torch and name != "torch" else ""
    if symbol.startswith("cu"):
        why.append(
            f"`{symbol}` is a CUDA driver/runtime function: the node's driver or CUDA libraries are older than the "
            f"ones {name} was built for (`nvidia-smi` shows the driver's CUDA version)."
        )
    if together:
        why.append(
            f"The missing symbol is PyTorch's: {name} and torch must come from one release ({release}: torch=={torch})."
        )
    condition = f"To match SGLang {release}" if known else "I" + unknown_release(release)[1:]
    why.append(
        f"{condition}: `pip install '{name}=={latest}'{together}` in the unit's environment "
        f"(upgrade SGLang and {name} together)."
    )
    return Action(summary=None, changes=[], why=why)


def _span(releases: list[str]) -> str:
    return releases[0] if len(releases) == 1 else f"{releases[0]}-{releases[-1]}"
