"""The new namespaces and their mounts: the launcher chain and the boot script that run before systemd is exec'd.

How it is isolated from the host (each point fixes a real hazard):

- ``unshare --pid --fork --mount --propagation private --uts --cgroup``; inside, ``proc`` on /proc and
  tmpfs on /run, /tmp and /var/log/journal (or /var/log when the host has no journal folder) are
  mounted, and checked to be tmpfs (and /tmp a different file system from the host's), *before*
  systemd is exec'd: a systemd that reaches systemd-tmpfiles otherwise empties the host's /tmp.
  No tmpfiles unit is on the unit path anyway (``units``).
- ``SYSTEMD_UNIT_PATH`` is the private unit folder; ``SYSTEMD_GENERATOR_PATH`` is an empty folder, so no
  generator runs.
- /proc/sys and /sys are read-only inside, so PID 1 cannot change host-wide sysctls (it tries to
  raise fs.nr_open and similar limits when it thinks it owns the machine); host values stay intact.
- /dev/console is bound to a pty the sandbox owns (``console``), so PID 1 never resets the host console.
- The cgroup hierarchies mounted inside are the sandbox's own (``cgroups``): the launcher moves itself into
  them before it becomes unshare.
- The launcher chain runs under ``setpriv --pdeathsig KILL`` and ``unshare --kill-child``: if the
  Python process dies, even by SIGKILL, the private PID 1 and with it every process inside die too.

A checkout, a venv or a work folder under /tmp (the most common scratch folder) stays usable: before the
tmpfs goes on /tmp, each such path the units need (``visible``; by default this Python's prefix and
interpreter, crashdoc's package and its checkout, and the work folder) is held by a bind mount under the
private /run, and bound back to the same path on top of the new tmpfs; symlinks under /tmp on the way to
them are recreated. Nothing else of the host's /tmp is visible inside, and all of it happens in the
private mount namespace only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from crashdoc.sandbox.cgroups import SandboxCgroups
from crashdoc.sandbox.errors import SandboxError
from crashdoc.sandbox.host import systemd_binary
from crashdoc.sandbox.units import TARGET

# Launcher: moves itself into the sandbox cgroups, then becomes unshare. $@ = cgroup.procs files.
OUTER_SH = r"""set -eu
for procs in "$@"; do echo $$ > "$procs"; done
exec unshare --pid --fork --kill-child=SIGKILL --mount --propagation private --uts --cgroup \
    /bin/sh "$SB_STATE/boot/inner.sh"
"""

# PID 1 of the new namespaces until it execs systemd. Every mount is checked: exec'ing systemd with
# the host's /tmp visible is the one mistake that destroys data on the host.
INNER_SH = r"""set -eu
fail() { echo "crashdoc-sandbox: $*" >&2; exit 97; }
mount -t proc -o nosuid,nodev,noexec proc /proc || fail "cannot mount /proc"
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run || fail "cannot mount tmpfs on /run"
# Paths under /tmp that the units need (boot/keep: one per line) are held under /run while the tmpfs goes on.
hold=/run/crashdoc-sandbox-keep
mkdir -m 0700 "$hold"
cp "$SB_STATE/boot/keep" "$SB_STATE/boot/links" "$hold/" || fail "cannot read the list of /tmp paths to keep"
n=0
while IFS= read -r path; do
    n=$((n + 1))
    if [ -d "$path" ]; then mkdir "$hold/$n"; else : > "$hold/$n"; fi
    mount --bind "$path" "$hold/$n" || fail "cannot hold $path"
done < "$hold/keep"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp || fail "cannot mount tmpfs on /tmp"
n=0
while IFS= read -r path; do
    n=$((n + 1))
    if [ -d "$hold/$n" ]; then mkdir -p "$path"; else mkdir -p "$(dirname "$path")" && : > "$path"; fi
    mount --move "$hold/$n" "$path" || fail "cannot bind $path back on the private /tmp"
    rm -rf "$hold/$n"
done < "$hold/keep"
while IFS= read -r link && IFS= read -r target; do
    [ -e "$link" ] || [ -L "$link" ] || { mkdir -p "$(dirname "$link")" && ln -s "$target" "$link"; } \
        || fail "cannot recreate the symlink $link"
done < "$hold/links"
rm -rf "$hold"
if [ -d /var/log/journal ]; then
    mount -t tmpfs -o mode=2755,nosuid,nodev tmpfs /var/log/journal || fail "cannot mount /var/log/journal"
else
    mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /var/log || fail "cannot mount tmpfs on /var/log"
    mkdir -m 2755 /var/log/journal
fi
for d in /run /tmp /var/log/journal; do
    [ "$(stat -f -c %T "$d")" = tmpfs ] || fail "$d is not a private tmpfs; refusing to boot"
done
[ "$(stat -c %d:%i /tmp)" != "$SB_HOST_TMP" ] || fail "the host /tmp is still visible; refusing to boot"
mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys
if [ -e /proc/sysrq-trigger ]; then
    mount --bind /proc/sysrq-trigger /proc/sysrq-trigger && mount -o remount,bind,ro /proc/sysrq-trigger
fi
mount --bind /sys /sys && mount -o remount,bind,ro,nosuid,nodev,noexec /sys
mount -t tmpfs -o mode=0755,nosuid,nodev,noexec tmpfs /sys/fs/cgroup || fail "cannot mount /sys/fs/cgroup"
case "$SB_CGROUP_LAYOUT" in
unified)
    mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 /sys/fs/cgroup || fail "cannot mount cgroup2" ;;
hybrid|legacy)
    if [ "$SB_CGROUP_LAYOUT" = hybrid ]; then
        mkdir /sys/fs/cgroup/unified
        mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 /sys/fs/cgroup/unified || fail "cannot mount cgroup2"
    fi
    for opts in $SB_CGROUP_V1; do
        dir=${opts#none,name=}; dir=${dir#none,}
        mkdir -p "/sys/fs/cgroup/$dir"
        mount -t cgroup -o "nosuid,nodev,noexec,$opts" cgroup "/sys/fs/cgroup/$dir" \
            || fail "cannot mount the cgroup v1 hierarchy $opts"
    done ;;
*) fail "unsupported cgroup layout $SB_CGROUP_LAYOUT" ;;
esac
mount --bind "$SB_PTY" /dev/console || fail "cannot bind the console pty"
# journald writes to /var/log/journal from the start (no systemd-journal-flush.service here).
mkdir -p /run/systemd/journal && : > /run/systemd/journal/flushed
cd /
exec env -i container=unshare LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    SYSTEMD_UNIT_PATH="$SB_STATE/units" SYSTEMD_GENERATOR_PATH="$SB_STATE/generators" \
    SYSTEMD_ENVIRONMENT_GENERATOR_PATH="$SB_STATE/generators" \
    "$SB_SYSTEMD" --unit="$SB_TARGET" --show-status=no
"""


def write_boot_folder(boot: Path, visible: Iterable[str | os.PathLike[str]]) -> None:
    """The boot scripts, and the /tmp paths (``visible``, as ``tmp_mounts`` finds them) they bind back."""
    (boot / "outer.sh").write_text(OUTER_SH)
    (boot / "inner.sh").write_text(INNER_SH)
    binds, links = tmp_mounts(visible)
    (boot / "keep").write_text("".join(f"{b}\n" for b in binds))
    (boot / "links").write_text("".join(f"{link}\n{target}\n" for link, target in links))


def start_launcher(state: Path, console: str, console_fd: int, cgroups: SandboxCgroups) -> subprocess.Popen[bytes]:
    """Start the chain that ends in systemd as PID 1 of the new namespaces (``state``: the folder that holds
    ``boot/`` and ``units/``); its output and PID 1's console go to the pty ``console``."""
    host_tmp = os.stat("/tmp")
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "LANG": "C.UTF-8",
        "SB_STATE": str(state),
        "SB_PTY": console,
        "SB_SYSTEMD": str(systemd_binary()),
        "SB_TARGET": TARGET,
        "SB_CGROUP_LAYOUT": cgroups.layout,
        "SB_CGROUP_V1": cgroups.v1_mounts,
        "SB_HOST_TMP": f"{host_tmp.st_dev}:{host_tmp.st_ino}",  # inside, /tmp must differ
    }
    argv = ["/bin/sh", str(state / "boot" / "outer.sh"), *(str(c / "cgroup.procs") for c in cgroups.paths)]
    if shutil.which("setpriv"):
        argv = ["setpriv", "--pdeathsig", "KILL", *argv]
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=console_fd,
        stderr=console_fd,
        env=env,
        cwd="/",
        start_new_session=True,
    )


def default_visible_paths() -> list[Path]:
    """What a unit or the daemon inside runs from: this Python (its prefix, its interpreter, the folders on its
    import path), the folder that holds the ``crashdoc`` package and, for a source checkout (``src/`` layout),
    the checkout."""
    package_root = Path(__file__).resolve().parents[2]
    paths = [Path(sys.prefix), Path(sys.executable), package_root, *(Path(p) for p in sys.path if p)]
    if (package_root.parent / "pyproject.toml").is_file():
        paths.append(package_root.parent)
    return paths


def tmp_mounts(paths: Iterable[str | os.PathLike[str]]) -> tuple[list[Path], list[tuple[Path, str]]]:
    """What must be bound back on the sandbox's private /tmp for ``paths`` to work inside: the real
    folders or files under /tmp they lead to (outermost only), and the symlinks under /tmp on the way
    there (link, target) that no bound folder already holds. Paths that do not exist are skipped."""
    tmp = Path("/tmp")
    binds: set[Path] = set()
    links: dict[Path, str] = {}
    for given in paths:
        real = _walk(Path(os.path.abspath(given)), links)
        if real is not None and tmp in real.parents:
            binds.add(real)
    outer = sorted(b for b in binds if not any(o in b.parents for o in binds))
    kept = [(link, target) for link, target in links.items() if tmp in link.parents]
    kept = [(link, target) for link, target in kept if not any(o in link.parents for o in outer)]
    for path in [*outer, *(link for link, _ in kept), *(Path(t) for _, t in kept)]:
        if "\n" in str(path):
            raise SandboxError(f"cannot keep {str(path)!r} visible in the sandbox: its name holds a newline")
    return outer, sorted(kept)


def _walk(path: Path, links: dict[Path, str]) -> Path | None:
    """Resolve ``path`` one component at a time, noting each symlink met (link -> its target as written);
    None when it does not exist or loops."""
    current, rest = Path("/"), list(path.parts[1:])
    for _ in range(256):
        if not rest:
            return current
        part = rest.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            current = current.parent
            continue
        nxt = current / part
        if nxt.is_symlink():
            try:
                target = os.readlink(nxt)
            except OSError:
                return None
            links[nxt] = target
            base = Path(target) if os.path.isabs(target) else current / target
            current, rest = Path("/"), [*base.parts[1:], *rest]
        elif nxt.exists():
            current = nxt
        else:
            return None
    return None
