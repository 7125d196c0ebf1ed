"""The versions each SGLang 0.5.x release pins for the libraries its kernels and model code depend on.

Data, not code: the `Requires-Dist` lines of every SGLang 0.5.x wheel's METADATA (the base requirements, or the
`srt` extra where 0.5.1-0.5.2 kept them). Regenerate with
`python scripts/sglang-pins.py .cache/sglang-wheels > src/crashdoc/remedy/pins.py`.
"""

from __future__ import annotations

LATEST = "0.5.23"

_REQUIRES: dict[str, str] = {
    "0.5.1": "flashinfer_python==0.2.11.post3 sgl-kernel==0.3.5 torch==2.8.0 transformers==4.55.2",
    "0.5.1.post1": "flashinfer_python==0.2.11.post3 sgl-kernel==0.3.5 torch==2.8.0 transformers==4.55.2",
    "0.5.1.post2": "flashinfer_python==0.2.14.post1 sgl-kernel==0.3.5 torch==2.8.0 transformers==4.55.2",
    "0.5.1.post3": "flashinfer_python==0.2.14.post1 sgl-kernel==0.3.7 torch==2.8.0 transformers==4.55.2",
    "0.5.2": "flashinfer_python==0.3.1 sgl-kernel==0.3.9.post2 torch==2.8.0 transformers==4.56.1",
    "0.5.3": "flashinfer_python==0.4.0rc3 sgl-kernel==0.3.14.post1 torch==2.8.0 transformers==4.57.0",
    "0.5.3.post1": "flashinfer_python==0.4.0 sgl-kernel==0.3.15 torch==2.8.0 transformers==4.57.0",
    "0.5.3.post2": "flashinfer_python==0.4.0 sgl-kernel==0.3.15 torch==2.8.0 transformers==4.57.1",
    "0.5.3.post3": "flashinfer_python==0.4.0 sgl-kernel==0.3.15 torch==2.8.0 transformers==4.57.1",
    "0.5.4": "flashinfer_python==0.4.1 sgl-kernel==0.3.16.post3 torch==2.8.0 transformers==4.57.1",
    "0.5.4.post1": "flashinfer_python==0.4.1 sgl-kernel==0.3.16.post4 torch==2.8.0 transformers==4.57.1",
    "0.5.4.post2": "flashinfer_python==0.4.1 sgl-kernel==0.3.16.post4 torch==2.8.0 transformers==4.57.1",
    "0.5.4.post3": "flashinfer_python==0.5.0 sgl-kernel==0.3.16.post4 torch==2.8.0 transformers==4.57.1",
    "0.5.5": "flashinfer_python==0.5.0 sgl-kernel==0.3.16.post5 torch==2.8.0 transformers==4.57.1",
    "0.5.5.post1": "flashinfer_python==0.5.0 sgl-kernel==0.3.17 torch==2.8.0 transformers==4.57.1",
    "0.5.5.post2": "flashinfer_python==0.5.0 sgl-kernel==0.3.17 torch==2.8.0 transformers==4.57.1",
    "0.5.5.post3": "flashinfer_python==0.5.2 sgl-kernel==0.3.17.post1 torch==2.8.0 transformers==4.57.1",
    "0.5.6": "flashinfer_python==0.5.3 sgl-kernel==0.3.18.post2 torch==2.9.1 transformers==4.57.1",
    "0.5.6.post1": "flashinfer_python==0.5.3 sgl-kernel==0.3.19 torch==2.9.1 transformers==5.0.0rc0",
    "0.5.6.post2": "flashinfer_python==0.5.3 sgl-kernel==0.3.19 torch==2.9.1 transformers==4.57.1",
    "0.5.7": "flashinfer_python==0.5.3 sgl-kernel==0.3.20 torch==2.9.1 transformers==4.57.1",
    "0.5.8": "flashinfer_python==0.6.1 sgl-kernel==0.3.21 torch==2.9.1 transformers==4.57.1",
    "0.5.8.post1": "flashinfer_python==0.6.1 sgl-kernel==0.3.21 torch==2.9.1 transformers==4.57.1",
    "0.5.9": "flashinfer_python==0.6.3 sgl-kernel==0.3.21 torch==2.9.1 transformers==4.57.1",
    "0.5.10": "flashinfer_python==0.6.7.post2 sglang-kernel==0.4.1 torch==2.9.1 transformers==5.3.0",
    "0.5.10.post1": "flashinfer_python==0.6.7.post3 sglang-kernel==0.4.1 torch==2.9.1 transformers==5.3.0",
    "0.5.11": "flashinfer_python==0.6.8.post1 sglang-kernel==0.4.2 torch==2.11.0 transformers==5.6.0",
    "0.5.12": "flashinfer_python==0.6.11.post1 sglang-kernel==0.4.2.post2 torch==2.11.0 transformers==5.6.0",
    "0.5.12.post1": "flashinfer_python==0.6.11.post1 sglang-kernel==0.4.2.post2 torch==2.11.0 transformers==5.6.0",
    "0.5.13": "flashinfer_python==0.6.12 sglang-kernel==0.4.3 torch==2.11.0 transformers==5.8.1",
    "0.5.13.post1": "flashinfer_python==0.6.12 sglang-kernel==0.4.3 torch==2.11.0 transformers==5.8.1",
    "0.5.14": "flashinfer_python==0.6.12 sglang-kernel==0.4.4 torch==2.11.0 transformers==5.8.1",
    "0.5.15": "flashinfer_python==0.6.12 sglang-kernel==0.4.4 torch==2.11.0 transformers==5.12.1",
    "0.5.15.post1": "flashinfer_python==0.6.12 sglang-kernel==0.4.4 torch==2.11.0 transformers==5.12.1",
    "0.5.16": "flashinfer_python==0.6.14 sglang-kernel==0.4.5 torch==2.11.0 transformers==5.12.1",
    "0.5.17": "flashinfer_python==0.6.15.post1 sglang-kernel==0.4.5 torch==2.11.0 transformers==5.12.1",
    "0.5.18": "flashinfer_python==0.6.17 sglang-kernel==0.4.6.post1 torch==2.13.0 transformers==5.12.1",
    "0.5.19": "flashinfer_python==0.6.18 sglang-kernel==0.4.6.post1 torch==2.13.0 transformers==5.12.1",
    "0.5.20": "flashinfer_python==0.6.18 sglang-kernel==0.4.7 torch==2.13.0 transformers==5.12.1",
    "0.5.21": "flashinfer_python==0.6.18 sglang-kernel==0.4.7 torch==2.13.0 transformers==5.12.1",
    "0.5.22": "flashinfer_python==0.7.1 sglang-kernel==0.4.9 torch==2.14.1 transformers==5.19.0",
    "0.5.23": "flashinfer_python==0.7.2 sglang-kernel==0.4.10 torch==2.14.1 transformers==5.19.0",
}

PINS: dict[str, dict[str, str]] = {
    release: dict(pin.split("==", 1) for pin in requires.split()) for release, requires in _REQUIRES.items()
}
