"""`crashdoc run`: the daemon, from its configuration and command-line options."""

from __future__ import annotations

import argparse
import dataclasses
import os

from crashdoc.errors import ProblemsError, UserError


def main(args: argparse.Namespace) -> int:
    """The daemon."""
    from crashdoc.commands.pipeline import daemon_engine
    from crashdoc.config import ConfigError, load_config, parse_listen, resolve_path, runbook_base
    from crashdoc.runtime.build import build
    from crashdoc.runtime.log import log

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        raise UserError(exc.said("invalid configuration, not starting")) from exc
    overrides = {}
    if args.state_directory:
        overrides["state_directory"] = args.state_directory
    if args.directory:
        overrides["journal_directory"] = args.directory
    if args.runbook_base_url:
        overrides["runbook_base_url"] = runbook_base(args.runbook_base_url)
    if getattr(args, "web_config_file", None):
        overrides["web_config_file"] = resolve_path(args.web_config_file)
    if args.alertmanager_url:
        overrides["alertmanager"] = dataclasses.replace(config.alertmanager, url=args.alertmanager_url)
    if args.listen:
        try:
            parse_listen(args.listen)
        except ValueError as exc:
            raise UserError(f"--listen: {exc}") from exc
        overrides["listen"] = args.listen
    for option, url in (("--runbook-base-url", args.runbook_base_url), ("--alertmanager-url", args.alertmanager_url)):
        if url and not url.startswith(("http://", "https://")):
            raise UserError(f"{option}: must be an http(s) URL, got {url!r}")
    if overrides:
        config = dataclasses.replace(config, **overrides)
    try:
        daemon, http = build(config, daemon_engine)
    except OSError as exc:
        raise UserError(str(exc.strerror or exc)) from exc
    except ProblemsError as exc:  # the signature library, or the web configuration (TLS, basic auth)
        from crashdoc.outputs.webconfig import WebConfigError

        if isinstance(exc, WebConfigError):
            raise UserError(exc.said("the web configuration has problems, not starting")) from exc
        raise UserError(exc.said("the signature library has problems")) from exc
    daemon.notify = sd_notify
    daemon.config_path = args.config  # SIGHUP reads it again; the options above keep winning
    daemon.overrides = overrides
    daemon.prepare()
    host, port = http.address
    log(
        f"watching {', '.join(r.pattern for r in config.units)}; {http.scheme}://{host}:{port}/metrics "
        f"(library: {len(daemon.holder.library)} signatures, D-Bus: {'up' if daemon.health.dbus_up else 'down'})"
    )
    return daemon.run(http)


def sd_notify(state: str) -> None:
    """Tell systemd (Type=notify) we are ready / alive; a no-op outside a notify unit."""
    if not os.environ.get("NOTIFY_SOCKET"):
        return
    try:
        from systemd import daemon as sd_daemon

        sd_daemon.notify(state)
    except (ImportError, OSError):
        pass
