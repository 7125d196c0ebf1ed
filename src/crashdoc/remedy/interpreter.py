"""Which Python runs SGLang for a launch command, and whether crashdoc may run it.

Only an interpreter the unit's own files name is ever run: its ExecStart (systemd, over D-Bus) or the launch
script it runs, never a path read from a log or a paste. One that another user could change is never run (it
would run code as crashdoc).
"""

from __future__ import annotations

import os
import posixpath

from crashdoc.remedy.commandline import LaunchCommand, Reader, read_text_file


def interpreter_of(inv: LaunchCommand, read: Reader = read_text_file) -> tuple[str | None, str]:
    """The Python that runs SGLang for this command, or None and why not."""
    if inv.container:
        return None, f"SGLang runs inside a container ({inv.container}); its Python is not on this host"
    words = inv.argv
    word = words[inv.launcher]
    if posixpath.basename(word) == "sglang":  # an entry-point script: its shebang names the interpreter
        try:
            first = read(word).split("\n", 1)[0]
        except (OSError, UnicodeError, ValueError):
            return None, f"cannot read {word} to find its interpreter"
        if not first.startswith("#!"):
            return None, f"{word} has no #! line"
        parts = first[2:].split()
        if parts and posixpath.basename(parts[0]) == "env" and len(parts) > 1:
            return parts[1], ""
        return (parts[0], "") if parts else (None, f"{word} has an empty #! line")
    if "$" in word:
        return None, f"the interpreter is a variable ({word})"
    return word, ""


def unsafe_to_run(interpreter: str, *, uid: int | None = None) -> str:
    """Why crashdoc will not run this interpreter ("" when it may): it, its folder and the folder above (a
    venv's root) must belong to root or to crashdoc's own user and be writable by no one else, so that running
    the check gives no other user a way to run code as crashdoc."""
    me = os.geteuid() if uid is None else uid
    path = interpreter
    if not posixpath.isabs(path):
        return f"the interpreter {interpreter} is not an absolute path"
    try:
        folder = posixpath.dirname(posixpath.normpath(path))
        real = os.path.realpath(path)
        for p in dict.fromkeys((real, posixpath.dirname(real), folder, posixpath.dirname(folder))):
            st = os.stat(p)
            if st.st_uid not in (0, me) or st.st_mode & 0o022:
                mode = f"{st.st_mode & 0o777:o}"
                return f"{p} may be changed by another user (uid {st.st_uid}, mode {mode}); crashdoc does not run it"
    except OSError as exc:
        return f"cannot run {interpreter}: {exc.strerror or exc}"
    return ""
