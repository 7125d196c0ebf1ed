#!/bin/sh
# Unpack SGLang 0.5.23's source (the released wheel, never imported) into .cache/ for the tests that read
# SGLang's real messages: `signatures mine` counts and coverage. Skipped quietly when PyPI is unreachable.
set -eu
dest=".cache/sglang-0.5.23"
[ -f "$dest/sglang/srt/server_args.py" ] && exit 0
mkdir -p .cache/wheels
if ! .venv/bin/python -m pip download -q --no-deps "sglang==0.5.23" -d .cache/wheels >/dev/null 2>&1; then
    echo "could not download sglang==0.5.23: the tests that read its source will be skipped" >&2
    exit 0
fi
rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
.venv/bin/python - "$dest.tmp" <<'PY'
import sys, zipfile, glob
wheel = sorted(glob.glob(".cache/wheels/sglang-0.5.23-*.whl"))[-1]
with zipfile.ZipFile(wheel) as z:
    z.extractall(sys.argv[1], [n for n in z.namelist() if n.startswith("sglang/")])
PY
mv "$dest.tmp" "$dest"
