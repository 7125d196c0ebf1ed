"""What TLS and basic auth cost a scrape: `python -m bench.tls_scrape [--scrapes N]`.

One HTTP view serving a /metrics body of a fleet host's size, scraped N times with a new connection each
time (as Prometheus does after a keep-alive times out) over plain HTTP (the baseline), TLS, and TLS with
basic auth (a cost-10 bcrypt hash, as `htpasswd -nBC 10` makes); printed as ratios against the baseline
measured in the same run, plus the first, uncached password check against a cached one.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import ssl
import statistics
import tempfile
import time
from pathlib import Path

import bcrypt
import trustme

from crashdoc.outputs.http import HttpServer
from crashdoc.outputs.metrics import Health
from crashdoc.outputs.webconfig import WebConfigHolder

BODY = b"".join(b'crashdoc_unit_crashloop{unit="sglang-%d.service"} 0.0\n' % i for i in range(400))


class View:
    def metrics(self) -> bytes:
        return BODY

    def diagnoses_json(self, unit: str | None) -> str:
        return '{"diagnoses": []}'

    def unit_page(self, unit: str) -> bytes | None:
        return None

    def runbook_page(self, signature: str) -> bytes | None:
        return None

    def index_page(self) -> bytes:
        return b""

    def health_status(self) -> tuple[bool, dict[str, object]]:
        return True, {}


def scrape(port: int, context: ssl.SSLContext | None, auth: str | None) -> float:
    began = time.perf_counter()
    conn = (
        http.client.HTTPSConnection("127.0.0.1", port, context=context)
        if context is not None
        else http.client.HTTPConnection("127.0.0.1", port)
    )
    conn.request("GET", "/metrics", headers={"Authorization": auth} if auth else {})
    response = conn.getresponse()
    assert response.status == 200 and response.read() == BODY
    conn.close()
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scrapes", type=int, default=300)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="crashdoc-bench-tls-"))
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1")
    issued.private_key_pem.write_to_path(str(folder / "k.pem"))
    (folder / "c.pem").write_bytes(b"".join(b.bytes() for b in issued.cert_chain_pems))
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    password = "bench password"
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(10)).decode()
    (folder / "tls.yml").write_text("tls_server_config: {cert_file: c.pem, key_file: k.pem}\n")
    (folder / "auth.yml").write_text(
        f"tls_server_config: {{cert_file: c.pem, key_file: k.pem}}\nbasic_auth_users: {{bench: '{hashed}'}}\n"
    )
    client = ssl.create_default_context(cafile=str(folder / "ca.pem"))
    auth = "Basic " + base64.b64encode(f"bench:{password}".encode()).decode()
    servers = {
        "plain": HttpServer(View(), "127.0.0.1", 0),
        "tls": HttpServer(
            View(), "127.0.0.1", 0, web=WebConfigHolder(folder / "tls.yml", Health(), log=lambda m: None)
        ),
        "tls+auth": HttpServer(
            View(), "127.0.0.1", 0, web=WebConfigHolder(folder / "auth.yml", Health(), log=lambda m: None)
        ),
    }
    for s in servers.values():
        s.server.daemon_threads = True
        s._thread.start()  # no file watching: only the serving path is timed
    ports = {name: s.address[1] for name, s in servers.items()}
    first_check = scrape(ports["tls+auth"], client, auth)  # the one bcrypt check; later ones hit the cache
    times: dict[str, list[float]] = {name: [] for name in servers}
    for _ in range(args.scrapes):  # interleaved, so machine load hits every variant alike
        times["plain"].append(scrape(ports["plain"], None, None))
        times["tls"].append(scrape(ports["tls"], client, None))
        times["tls+auth"].append(scrape(ports["tls+auth"], client, auth))
    base = statistics.median(times["plain"])
    print(f"scrapes of /metrics ({len(BODY)} bytes), new connection each, median of {args.scrapes}:")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:9} {median * 1000:7.2f} ms   {median / base:5.2f}x plain HTTP")
    cached = statistics.median(times["tls+auth"])
    print(
        f"  first scrape with a password (bcrypt cost 10, uncached): {first_check * 1000:.1f} ms = "
        f"{first_check / cached:.1f}x a cached one"
    )
    for s in servers.values():
        s.server.shutdown()
        s.server.server_close()


if __name__ == "__main__":
    main()
