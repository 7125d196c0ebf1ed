"""crashdoc's configuration: a YAML file, every key optional, errors as file:line.

With no file at all crashdoc watches `sglang*.service` with built-in thresholds, so that
`crashdoc run` needs no arguments on a fresh GPU host.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crashdoc.errors import ProblemsError
from crashdoc.events import ROLES, Thresholds, WatchRule
from crashdoc.outputs.httpclient import HttpClientConfig

if TYPE_CHECKING:  # YAML is imported when there is a file to read (10 ms that `diagnose` without --config saves)
    from crashdoc.yamlfile import LocatedYaml

DEFAULT_PORT = 10247  # outside the 9100-9999 exporter range, which is fully allocated
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"
DEFAULT_STATE_DIRECTORY = "/var/lib/crashdoc"
DEFAULT_UNITS = (WatchRule("sglang*.service", "any"),)
DEFAULT_NVIDIA_GPUS = "/proc/driver/nvidia/gpus"  # the NVIDIA driver's list of the host's GPUs


class ConfigError(ProblemsError):
    """The configuration file has problems (each as FILE:LINE: KEY: WHAT)."""


@dataclass(frozen=True, slots=True)
class AlertmanagerConfig:
    url: str | None = None
    resend_interval: float = 60.0  # re-send active alerts this often (Alertmanager expects it)
    timeout: float = 5.0
    client: HttpClientConfig = field(default_factory=HttpClientConfig)  # TLS, auth, proxy


@dataclass(frozen=True, slots=True)
class SglangChecksConfig:
    """The daemon's checks of fixes by each unit's own SGLang (`runtime.remedies`): on a host where running the
    unit's interpreter is not wanted they are turned off, on a big one given more room."""

    enabled: bool = True  # false: fixes are ranked with the shipped argument facts, no SGLang is run
    at_once: int = 2  # searches at once: each is one SGLang child that forks two checks at a time
    waiting: int = 32  # searches queued; more are said busy and asked again at the unit's next restart


@dataclass(frozen=True, slots=True)
class Config:
    units: tuple[WatchRule, ...] = DEFAULT_UNITS
    listen: str = DEFAULT_LISTEN
    thresholds: Thresholds = field(default_factory=Thresholds)
    signature_folders: tuple[str, ...] = ()  # extra folders, loaded after the built-in library
    builtin_signatures: bool = True
    state_directory: str = field(default_factory=lambda: default_state_directory())
    journal_directory: str | None = None
    alertmanager: AlertmanagerConfig = field(default_factory=AlertmanagerConfig)
    runbook_base_url: str | None = None
    instance: str = field(default_factory=lambda: os.uname().nodename)  # gethostname(), without `socket`
    dbus: bool = True  # set false to run from the journal alone
    web_config_file: str | None = None  # TLS and basic auth for the HTTP view (exporter-toolkit's format)
    # where the host's GPUs are listed (their PCI addresses and indexes, for Xids); None: read none
    nvidia_gpus: str | None = DEFAULT_NVIDIA_GPUS
    sglang_checks: SglangChecksConfig = field(default_factory=SglangChecksConfig)
    source: str = "(built-in defaults)"

    @property
    def listen_address(self) -> tuple[str, int]:
        return parse_listen(self.listen)


def default_state_directory() -> str:
    """systemd's StateDirectory= (exported as $STATE_DIRECTORY) when run as a unit, else /var/lib/crashdoc."""
    env = os.environ.get("STATE_DIRECTORY", "")
    return env.split(":", 1)[0] if env else DEFAULT_STATE_DIRECTORY


def resolve_path(value: str, config_source: str | None = None) -> str:
    """A file the configuration names: absolute as written; relative, in systemd's credentials folder
    ($CREDENTIALS_DIRECTORY, set by `LoadCredential=`) when crashdoc runs with one, else next to the
    configuration file (the current folder for a command-line option)."""
    path = Path(value)
    if path.is_absolute():
        return str(path)
    credentials = os.environ.get("CREDENTIALS_DIRECTORY")
    if credentials:
        return str(Path(credentials) / path)
    if config_source and Path(config_source).is_file():
        return str(Path(config_source).resolve().parent / path)
    return str(path.resolve())


def runbook_base(url: str) -> str:
    """The address crashdoc is reached at, from what a user passes as `runbook_base_url`: links append
    /runbook/<signature>, so a URL that already ends in /runbook (a runbook page's own address, minus
    the signature) is cut back to the base instead of linking to /runbook/runbook/<signature>."""
    base = url.rstrip("/")
    return base[: -len("/runbook")] if base.endswith("/runbook") else base


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"listen address must be HOST:PORT, got {value!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


_TOP = {
    "units",
    "listen",
    "thresholds",
    "signatures",
    "state_directory",
    "journal",
    "alertmanager",
    "runbook_base_url",
    "instance",
    "dbus",
    "web_config_file",
    "nvidia_gpus",
    "sglang_checks",
}
_CHECK_BOUNDS = {"at_once": (1, 16), "waiting": (1, 1024)}


def load_config(path: str | Path | None) -> Config:
    """Read a configuration file (None: the built-in defaults). Raises ConfigError with file:line."""
    if path is None:
        return Config()
    name = str(path)
    from crashdoc.yamlfile import read_located

    located, _ = read_located(path, ConfigError)
    if located.data is None:
        return Config(source=name)
    return _build(located, name)


def _build(doc: LocatedYaml, name: str) -> Config:
    problems: list[str] = []
    data = doc.data

    def bad(path: tuple[Any, ...], message: str) -> None:
        problems.append(doc.problem(name, path, message))

    if not isinstance(data, dict):
        raise ConfigError([f"{name}:1: the configuration must be a mapping of keys to values"])
    for key in data:
        if key not in _TOP:
            bad((key,), f"unknown key (known: {', '.join(sorted(_TOP))})")
    values: dict[str, Any] = {"source": name}

    units = data.get("units")
    if units is not None:
        rules: list[WatchRule] = []
        if not isinstance(units, list) or not units:
            bad(("units",), "must be a non-empty list of {name, role}")
        else:
            for i, entry in enumerate(units):
                if isinstance(entry, str):
                    entry = {"name": entry}
                if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
                    bad(("units", i), "each entry needs `name` (a unit name or glob)")
                    continue
                role = entry.get("role", "any")
                if role not in ROLES:
                    bad(("units", i, "role"), f"{role!r} is not one of {', '.join(ROLES)}")
                    continue
                extra = set(entry) - {"name", "role"}
                if extra:
                    bad(("units", i), f"unknown key(s): {', '.join(sorted(extra))}")
                name_ = entry["name"]
                if "." not in name_:
                    name_ += ".service"
                rules.append(WatchRule(name_, role))
            values["units"] = tuple(rules)

    if "listen" in data:
        try:
            parse_listen(str(data["listen"]))
            values["listen"] = str(data["listen"])
        except ValueError as exc:
            bad(("listen",), str(exc))

    thresholds = data.get("thresholds")
    if thresholds is not None:
        known = {f.name: f for f in fields(Thresholds)}
        kwargs: dict[str, Any] = {}
        if not isinstance(thresholds, dict):
            bad(("thresholds",), "must be a mapping")
        else:
            for key, value in thresholds.items():
                if key not in known:
                    bad(("thresholds", key), f"unknown threshold (known: {', '.join(known)})")
                elif (
                    isinstance(value, bool)
                    or not isinstance(value, int | float)
                    or not math.isfinite(value)
                    or value <= 0
                ):
                    bad(("thresholds", key), f"must be a positive number, got {value!r}")
                elif known[key].type in ("int", int) and value != int(value):
                    bad(("thresholds", key), f"must be a whole number of crashes, got {value!r}")
                else:
                    kwargs[key] = int(value) if known[key].type in ("int", int) else float(value)
            values["thresholds"] = Thresholds(**kwargs)

    sigs = data.get("signatures")
    if sigs is not None:
        if isinstance(sigs, list):
            sigs = {"folders": sigs}
        if not isinstance(sigs, dict):
            bad(("signatures",), "must be a list of folders or {builtin: bool, folders: [...]}")
        else:
            folders = sigs.get("folders", [])
            if not isinstance(folders, list) or not all(isinstance(f, str) for f in folders):
                bad(("signatures", "folders"), "must be a list of folder paths")
            else:
                values["signature_folders"] = tuple(folders)
            builtin = sigs.get("builtin", True)
            if not isinstance(builtin, bool):
                bad(("signatures", "builtin"), "must be true or false")
            else:
                values["builtin_signatures"] = builtin
            for extra in set(sigs) - {"folders", "builtin"}:
                bad(("signatures", extra), "unknown key")

    for key in ("state_directory", "runbook_base_url", "instance"):
        if key in data:
            if key == "runbook_base_url" and data[key] is None:
                continue  # null: the documented default, links to the listen address
            if not isinstance(data[key], str) or not data[key]:
                bad((key,), "must be a non-empty string")
            elif key == "runbook_base_url" and not data[key].startswith(("http://", "https://")):
                bad((key,), f"must be an http(s) URL (alerts link to it), got {data[key]!r}")
            else:
                values[key] = runbook_base(data[key]) if key == "runbook_base_url" else data[key]
    if "dbus" in data:
        if not isinstance(data["dbus"], bool):
            bad(("dbus",), "must be true or false")
        else:
            values["dbus"] = data["dbus"]

    if data.get("web_config_file") is not None:
        if not isinstance(data["web_config_file"], str) or not data["web_config_file"]:
            bad(("web_config_file",), "must be a file path (TLS and basic auth, exporter-toolkit's format)")
        else:
            values["web_config_file"] = resolve_path(data["web_config_file"], name)

    if "nvidia_gpus" in data:
        gpus = data["nvidia_gpus"]
        if gpus is not None and (not isinstance(gpus, str) or not gpus):
            bad(("nvidia_gpus",), "must be a folder path (the driver's gpus/ folder), or null to read none")
        else:
            values["nvidia_gpus"] = gpus if gpus is None else str(Path(name).resolve().parent / Path(gpus))

    jour = data.get("journal")
    if jour is not None:
        if not isinstance(jour, dict) or set(jour) - {"directory"}:
            bad(("journal",), "must be a mapping with `directory`")
        elif jour.get("directory") is not None:
            values["journal_directory"] = str(jour["directory"])

    checks = data.get("sglang_checks")
    if checks is not None:
        if not isinstance(checks, dict):
            bad(("sglang_checks",), "must be a mapping with enabled, at_once, waiting")
        else:
            kwargs = {}
            for key, value in checks.items():
                if key == "enabled":
                    if not isinstance(value, bool):
                        bad(("sglang_checks", key), "must be true or false")
                    else:
                        kwargs[key] = value
                elif key in _CHECK_BOUNDS:
                    low, high = _CHECK_BOUNDS[key]
                    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                        bad(("sglang_checks", key), f"must be a whole number from {low} to {high}, got {value!r}")
                    else:
                        kwargs[key] = value
                else:
                    bad(("sglang_checks", key), "unknown key (known: enabled, at_once, waiting)")
            values["sglang_checks"] = SglangChecksConfig(**kwargs)

    am = data.get("alertmanager")
    if am is not None:
        if not isinstance(am, dict):
            bad(("alertmanager",), "must be a mapping")
        else:
            kwargs = {}
            for key, value in am.items():
                if key == "url":
                    if value is not None and (
                        not isinstance(value, str) or not value.startswith(("http://", "https://"))
                    ):
                        bad(("alertmanager", "url"), "must be an http(s) URL")
                    else:
                        kwargs["url"] = value
                elif key in ("resend_interval", "timeout"):
                    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
                        bad(("alertmanager", key), "must be a positive number of seconds")
                    else:
                        kwargs[key] = float(value)
                elif key not in _CLIENT_KEYS:
                    bad(
                        ("alertmanager", key),
                        f"unknown key (known: url, resend_interval, timeout, {', '.join(_CLIENT_KEYS)})",
                    )
            kwargs["client"] = _client_config(am, name, bad)
            values["alertmanager"] = AlertmanagerConfig(**kwargs)

    if problems:
        raise ConfigError(problems)
    return Config(**values)


_CLIENT_KEYS = ("tls_config", "basic_auth", "authorization", "bearer_token_file", "proxy_url")


def _client_config(am: dict[str, Any], name: str, bad: Any) -> HttpClientConfig:
    """Prometheus' client settings for Alertmanager: tls_config, basic_auth, authorization or
    bearer_token_file, proxy_url; file paths resolved as `resolve_path` says."""
    kwargs: dict[str, Any] = {}

    def path_at(where: tuple[Any, ...], value: object) -> str | None:
        if not isinstance(value, str) or not value:
            bad(where, "must be a file path")
            return None
        return resolve_path(value, name)

    tls = am.get("tls_config")
    if tls is not None:
        if not isinstance(tls, dict):
            bad(("alertmanager", "tls_config"), "must be a mapping")
        else:
            for key, value in tls.items():
                where = ("alertmanager", "tls_config", key)
                if key in ("ca_file", "cert_file", "key_file"):
                    kwargs[key] = path_at(where, value)
                elif key == "insecure_skip_verify":
                    if not isinstance(value, bool):
                        bad(where, "must be true or false")
                    else:
                        kwargs[key] = value
                else:
                    bad(where, "unknown key (known: ca_file, cert_file, key_file, insecure_skip_verify)")
            if bool(kwargs.get("cert_file")) != bool(kwargs.get("key_file")):
                bad(("alertmanager", "tls_config"), "cert_file and key_file go together")
    auth = am.get("basic_auth")
    if auth is not None:
        if not isinstance(auth, dict) or not isinstance(auth.get("username"), str) or not auth["username"]:
            bad(("alertmanager", "basic_auth"), "must have `username` and `password_file` (or `password`)")
        else:
            kwargs["username"] = auth["username"]
            for key, value in auth.items():
                where = ("alertmanager", "basic_auth", key)
                if key == "password_file":
                    kwargs[key] = path_at(where, value)
                elif key == "password":
                    if not isinstance(value, str):
                        bad(where, "must be a string (better: password_file, readable by crashdoc alone)")
                    else:
                        kwargs[key] = value
                elif key != "username":
                    bad(where, "unknown key (known: username, password, password_file)")
            if "password" in auth and "password_file" in auth:
                bad(("alertmanager", "basic_auth"), "password and password_file are mutually exclusive")
    token = am.get("bearer_token_file")
    authz = am.get("authorization")
    if authz is not None:
        if (
            not isinstance(authz, dict)
            or authz.get("type", "Bearer") != "Bearer"
            or set(authz)
            - {
                "type",
                "credentials_file",
            }
        ):
            bad(("alertmanager", "authorization"), "must be {type: Bearer, credentials_file: FILE}")
        else:
            token = authz.get("credentials_file")
    if token is not None:
        where_token: tuple[str, ...] = ("alertmanager", "authorization" if authz is not None else "bearer_token_file")
        kwargs["bearer_token_file"] = path_at(where_token, token)
        if auth is not None:
            bad(where_token, "basic_auth and a bearer token are mutually exclusive")
    proxy = am.get("proxy_url")
    if proxy is not None:
        if not isinstance(proxy, str) or not proxy.startswith(("http://", "https://")):
            bad(("alertmanager", "proxy_url"), "must be an http(s) URL")
        else:
            kwargs["proxy_url"] = proxy
    return HttpClientConfig(**{k: v for k, v in kwargs.items() if v is not None})


@dataclass(slots=True)
class ConfigCheck:
    """What `check_config_file` found: problems (FILE:LINE first), or the summary of a good file."""

    problems: list[str] = field(default_factory=list)
    summary: list[str] = field(default_factory=list)


def check_config_file(name: str) -> ConfigCheck:
    """Validate a configuration as `crashdoc run` would, plus what would only fail once it runs
    (signature folders and their files, the journal folder, a relative state folder), so that a
    config rollout can be gated on it: every problem as FILE:LINE, or a summary of what it sets."""
    from crashdoc.matching.library import LibraryError, builtin_signature_dirs, load_library

    try:
        config = load_config(name)
    except ConfigError as exc:
        return ConfigCheck(problems=list(exc.problems))
    from crashdoc.yamlfile import read_located

    try:
        lines = read_located(name, ConfigError)[0].lines
    except ConfigError:  # read once already: only a file changed since could say otherwise
        lines = {}

    def at(*paths: tuple[object, ...]) -> str:
        """FILE:LINE of the first of `paths` written in the file (FILE alone for a default)."""
        line = next((lines[p] for p in paths if p in lines), 0)
        return f"{name}:{line}" if line else name

    problems: list[str] = []
    folders: list[Path] = []
    for i, folder in enumerate(config.signature_folders):
        if Path(folder).is_dir():
            folders.append(Path(folder))
        else:
            where = at(("signatures", "folders", i), ("signatures", i))
            problems.append(f"{where}: signatures.folders: {folder}: no such folder")
    builtin = builtin_signature_dirs() if config.builtin_signatures else []
    if config.builtin_signatures and not builtin:
        problems.append(f"{at(('signatures', 'builtin'))}: signatures.builtin: the built-in library is not installed")
    library = None
    if not config.builtin_signatures and not config.signature_folders:
        problems.append(
            f"{at(('signatures', 'builtin'), ('signatures',))}: signatures: no library (builtin is "
            "false and there are no folders)"
        )
    elif builtin or folders:
        try:
            library = load_library([*builtin, *folders])
        except LibraryError as exc:
            problems.extend(f"{p} (signature library, {at(('signatures',))})" for p in exc.problems)
    if config.journal_directory and not Path(config.journal_directory).is_dir():
        where = at(("journal", "directory"))
        problems.append(f"{where}: journal.directory: {config.journal_directory}: no such folder")
    if config.web_config_file:
        from crashdoc.outputs.webconfig import WebConfigError, load_web_config

        try:
            web = load_web_config(config.web_config_file)
        except WebConfigError as exc:
            problems.extend(f"{p} (web_config_file, {at(('web_config_file',))})" for p in exc.problems)
    for setting, path in config.alertmanager.client.files():
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            where = at(("alertmanager", *setting.split(".")), ("alertmanager",))
            problems.append(f"{where}: alertmanager.{setting}: {path}: {exc.strerror or exc}")
    if config.nvidia_gpus and config.nvidia_gpus != DEFAULT_NVIDIA_GPUS and not Path(config.nvidia_gpus).is_dir():
        where = at(("nvidia_gpus",))
        problems.append(f"{where}: nvidia_gpus: {config.nvidia_gpus}: no such folder")
    if not Path(config.state_directory).is_absolute():
        problems.append(
            f"{at(('state_directory',))}: state_directory: must be an absolute path, got "
            f"{config.state_directory!r} (a unit runs in /, which is read-only)"
        )
    if problems:
        return ConfigCheck(problems=problems)

    t, am = config.thresholds, config.alertmanager
    host, port = config.listen_address
    shown = os.uname().nodename if host in ("0.0.0.0", "::") else host
    scheme = "https" if config.web_config_file and web.ssl_context is not None else "http"
    links = (config.runbook_base_url or f"{scheme}://{shown}:{port}").rstrip("/")
    sources = ["built-in"] * bool(builtin) + [str(f) for f in folders]
    summary = [f"{name}: OK"]
    summary.append(f"  units:         {', '.join(f'{r.pattern} ({r.role})' for r in config.units)}")
    summary.append(f"  listen:        {config.listen} (/metrics, /diagnoses, /units/<unit>, /runbook/<signature>)")
    summary.append(
        f"  crash loop:    {t.startup_crashes} crashes before ready in a row, or {t.runtime_crashes} within "
        f"{t.runtime_window:g} s; recovered after {t.recovery:g} s up"
    )
    summary.append(f"  signatures:    {len(library) if library is not None else 0} from {', '.join(sources)}")
    summary.append(f"  state:         {config.state_directory}")
    summary.append(
        f"  journal:       {config.journal_directory or 'the system journal'}; D-Bus: "
        f"{'yes' if config.dbus else 'no (the journal alone)'}"
    )
    summary.append(
        f"  alerts:        {f'pushed to {am.url} every {am.resend_interval:g} s' if am.url else 'not pushed'}"
        f" (instance {config.instance})"
    )
    summary.append(f"  runbook links: {links}/runbook/<signature>")
    if config.nvidia_gpus:
        found = Path(config.nvidia_gpus).is_dir()
        summary.append(
            f"  GPUs:          {config.nvidia_gpus}{'' if found else ' (not here: no NVIDIA driver loaded)'}"
        )
    else:
        summary.append("  GPUs:          not read (Xids are tied to units by their pids alone)")
    if config.web_config_file:
        from crashdoc.outputs.webconfig import describe

        summary.append(f"  web:           {config.web_config_file}: {describe(web)}")
    return ConfigCheck(summary=summary)
