"""A realistic multi-unit journal, written without journald: export format -> systemd-journal-remote.

What it holds (per 1000 entries, on average):

- sglang-prefill.service (~20%) and sglang-decode.service (~25%): a PD pair of DeepSeek-V4 servers,
  each a launcher, 4 TP ranks spawned as their own processes and a detokenizer; TP0 logs SGLang
  0.5's `Prefill batch, ...` / `Decode batch, ...` lines, the launcher uvicorn's access lines.
  Every restart logs the start-up sequence again (`server_args={...}` of ~3 KB, weight loading,
  KV cache, CUDA graph, "The server is fired up and ready to roll!") under new PIDs.
- sglang-router.service (~10%): sgl-router request lines, ~10% of them 503/429.
- Noisy neighbours (~45%): kubelet (klog), containerd (logfmt), nginx ([warn]).
  `--watched 0.1` (`build(..., watched=0.1)`) makes the SGLang units a tenth of the entries and the
  neighbours the rest, in the same proportions among themselves (the default, 0.55, is the mix above).
- About every 20k entries one SGLang unit crashes with a real SGLang error: the traceback of one of
  the library's signature examples (every TP rank for a scheduler error), the launcher's SIGQUIT
  line, then PID 1's records with their real fields and MESSAGE_IDs (exited, failed, consumed,
  restart scheduled with N_RESTARTS, stopped, started with a new INVOCATION_ID).

Every stdout entry carries the 20 fields journald attaches (trusted `_PID`, `_UID`, `_COMM`, `_EXE`,
`_CMDLINE`, `_SYSTEMD_UNIT`, `_SYSTEMD_INVOCATION_ID`, `_BOOT_ID`, ...), like the reference journal
of `journal-read-limits.md`. The result is cached in bench/data by (entries, seed, version).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import DATA, JOURNAL_REMOTE, load_bench_library, log

VERSION = 3
WATCHED = 0.55  # the SGLang units' share of the entries (prefill 0.20, decode 0.25, router 0.10)
HOST = "gpu-node-17"
MODEL = "deepseek-ai/DeepSeek-V4-Flash"
PYTHON_EXE = "/opt/sglang/venv/bin/python3.11"
TP = 4

MSG_STARTED = "39f53479d3a045ac8e11786248231fbf"
MSG_STOPPED = "9d1aaa27d60140bd96365438aad20286"
MSG_EXITED = "98e322203f7a4ed290d09fe03c09fe15"
MSG_FAILED = "d9b373ed55a64feb8242e02dbe79a49c"
MSG_RESTART = "5eb03494b6584870a536b337290809b3"
MSG_CONSUMED = "ae8f7b866b0347b9af31fe1c80b127c0"


def _hex() -> str:
    return uuid.UUID(int=random.getrandbits(128)).hex


@dataclass
class Proc:
    """A process writing to the journal through its stdout stream."""

    unit: str
    pid: int
    comm: str
    exe: str
    cmdline: str
    invocation: str
    rank: str = ""  # SGLang log prefix (" TP0"), "" for the launcher
    identifier: str = "python3"
    block: bytes = b""  # every field but MESSAGE and the timestamps

    def build(self, machine: str, boot: str) -> None:
        fields = {
            "_TRANSPORT": "stdout",
            "PRIORITY": "6",
            "SYSLOG_FACILITY": "3",
            "SYSLOG_IDENTIFIER": self.identifier,
            "_PID": str(self.pid),
            "_UID": "0",
            "_GID": "0",
            "_COMM": self.comm,
            "_EXE": self.exe,
            "_CMDLINE": self.cmdline,
            "_CAP_EFFECTIVE": "1ffffffffff",
            "_SYSTEMD_CGROUP": f"/system.slice/{self.unit}",
            "_SYSTEMD_UNIT": self.unit,
            "_SYSTEMD_SLICE": "system.slice",
            "_SYSTEMD_INVOCATION_ID": self.invocation,
            "_STREAM_ID": _hex(),
            "_BOOT_ID": boot,
            "_MACHINE_ID": machine,
            "_HOSTNAME": HOST,
        }
        self.block = "".join(f"{k}={v}\n" for k, v in fields.items()).encode()


@dataclass
class Server:
    """One SGLang unit: launcher + TP ranks + detokenizer, and its run history."""

    unit: str
    mode: str  # prefill | decode
    port: int
    description: str
    launcher: Proc | None = None
    ranks: list[Proc] = field(default_factory=list)
    invocation: str = ""
    restarts: int = 0
    startup: list[tuple[Proc, str]] = field(default_factory=list)  # start-up lines still to write

    def argv(self) -> list[str]:
        argv = [
            PYTHON_EXE,
            "-m",
            "sglang.launch_server",
            "--model-path",
            MODEL,
            "--trust-remote-code",
            "--host",
            "0.0.0.0",
            "--port",
            str(self.port),
            "--disaggregation-mode",
            self.mode,
            "--disaggregation-ib-device",
            "mlx5_0",
            "--tp-size",
            str(TP),
            "--mem-fraction-static",
            "0.82" if self.mode == "prefill" else "0.85",
            "--enable-hierarchical-cache",
            "--hicache-ratio",
            "2.0",
        ]
        return argv


class Generator:
    def __init__(
        self,
        entries: int,
        seed: int,
        boot_id: str,
        rate: float = 1000.0,
        crash_every: tuple[int, int] = (14_000, 26_000),
        watched: float = WATCHED,
    ) -> None:
        self.crash_every = crash_every
        self.watched = watched
        self.entries = entries
        self.rng = random.Random(seed)
        random.seed(seed)
        self.boot = boot_id
        self.machine = _hex()
        self.rate = rate  # entries per second of simulated time
        self.t0_us = int((time.time() - entries / rate - 60) * 1e6)
        self.now_us = self.t0_us
        self.mono_us = 5_000_000_000
        self.next_pid = 4000
        self.written = 0
        self._sec = -1
        self._stamp = ""
        self.crashes: list[dict[str, object]] = []
        self.counts: dict[str, int] = {}
        lib, _, _ = load_bench_library()
        self.errors = _crash_texts(lib)
        self.servers = [
            Server("sglang-prefill.service", "prefill", 30000, "SGLang prefill server (DeepSeek-V4-Flash, TP4)"),
            Server("sglang-decode.service", "decode", 30001, "SGLang decode server (DeepSeek-V4-Flash, TP4)"),
        ]
        self.router = self._proc(
            "sglang-router.service",
            "sgl-router",
            "/usr/local/bin/sgl-router",
            "/usr/local/bin/sgl-router --pd-disaggregation --prefill http://127.0.0.1:30000 "
            "--decode http://127.0.0.1:30001 --host 0.0.0.0 --port 8000",
            _hex(),
            "sgl-router",
        )
        self.kubelet = self._proc(
            "kubelet.service",
            "kubelet",
            "/usr/bin/kubelet",
            "/usr/bin/kubelet --config=/var/lib/kubelet/config.yaml "
            "--kubeconfig=/etc/kubernetes/kubelet.conf --container-runtime-endpoint="
            "unix:///run/containerd/containerd.sock",
            _hex(),
            "kubelet",
        )
        self.containerd = self._proc(
            "containerd.service", "containerd", "/usr/bin/containerd", "/usr/bin/containerd", _hex(), "containerd"
        )
        self.nginx = self._proc("nginx.service", "nginx", "/usr/sbin/nginx", "nginx: worker process", _hex(), "nginx")
        self.pid1 = self._pid1_block()

    # --- processes ---------------------------------------------------------------------------

    def _proc(self, unit: str, comm: str, exe: str, cmdline: str, invocation: str, ident: str, rank: str = "") -> Proc:
        self.next_pid += self.rng.randint(1, 40)
        p = Proc(unit, self.next_pid, comm[:15], exe, cmdline, invocation, rank, ident)
        p.build(self.machine, self.boot)
        return p

    def _start_server(self, s: Server) -> None:
        s.invocation = _hex()
        argv = s.argv()
        cmd = " ".join(argv)
        s.launcher = self._proc(s.unit, "python3", PYTHON_EXE, cmd, s.invocation, "python3")
        spawn = (
            f"{PYTHON_EXE} -c from multiprocessing.spawn import spawn_main; "
            "spawn_main(tracker_fd=5, pipe_handle=7) --multiprocessing-fork"
        )
        s.ranks = [
            self._proc(s.unit, "sglang::schedul", PYTHON_EXE, spawn, s.invocation, "python3", f" TP{i}")
            for i in range(TP)
        ]
        detok = self._proc(s.unit, "sglang::detoken", PYTHON_EXE, spawn, s.invocation, "python3")
        L = s.launcher
        lines: list[tuple[Proc, str]] = []
        args = {
            "model_path": MODEL,
            "tokenizer_path": MODEL,
            "tokenizer_mode": "auto",
            "skip_tokenizer_init": False,
            "load_format": "auto",
            "trust_remote_code": True,
            "context_length": None,
            "is_embedding": False,
            "dtype": "auto",
            "kv_cache_dtype": "auto",
            "quantization": None,
            "served_model_name": MODEL,
            "host": "0.0.0.0",
            "port": s.port,
            "mem_fraction_static": 0.82 if s.mode == "prefill" else 0.85,
            "max_running_requests": None,
            "max_total_tokens": None,
            "chunked_prefill_size": 8192,
            "max_prefill_tokens": 16384,
            "schedule_policy": "fcfs",
            "schedule_conservativeness": 1.0,
            "tp_size": TP,
            "pp_size": 1,
            "stream_interval": 1,
            "random_seed": 951344417,
            "constrained_json_whitespace_pattern": None,
            "watchdog_timeout": 300,
            "download_dir": None,
            "base_gpu_id": 0,
            "log_level": "info",
            "log_level_http": None,
            "log_requests": False,
            "show_time_cost": False,
            "enable_metrics": True,
            "api_key": None,
            "file_storage_path": "sglang_storage",
            "enable_cache_report": False,
            "dp_size": 1,
            "load_balance_method": "round_robin",
            "ep_size": 1,
            "dist_init_addr": None,
            "nnodes": 1,
            "node_rank": 0,
            "json_model_override_args": "{}",
            "lora_paths": None,
            "max_loras_per_batch": 8,
            "attention_backend": "flashmla",
            "sampling_backend": "flashinfer",
            "grammar_backend": "xgrammar",
            "speculative_algorithm": None,
            "enable_double_sparsity": False,
            "disable_radix_cache": False,
            "disable_cuda_graph": False,
            "disable_cuda_graph_padding": False,
            "enable_nccl_nvls": False,
            "disable_custom_all_reduce": False,
            "enable_mixed_chunk": False,
            "enable_dp_attention": False,
            "enable_ep_moe": False,
            "enable_torch_compile": False,
            "torch_compile_max_bs": 32,
            "cuda_graph_max_bs": 160,
            "cuda_graph_bs": None,
            "torchao_config": "",
            "enable_nan_detection": False,
            "enable_p2p_check": False,
            "triton_attention_reduce_in_fp32": False,
            "num_continuous_decode_steps": 1,
            "delete_ckpt_after_loading": False,
            "enable_memory_saver": False,
            "allow_auto_truncate": False,
            "enable_custom_logit_processor": False,
            "tool_call_parser": None,
            "enable_hierarchical_cache": True,
            "hicache_ratio": 2.0,
            "hicache_size": 0,
            "hicache_write_policy": "write_through_selective",
            "hicache_io_backend": "kernel",
            "hicache_mem_layout": "layer_first",
            "hicache_storage_backend": None,
            "disaggregation_mode": s.mode,
            "disaggregation_transfer_backend": "mooncake",
            "disaggregation_bootstrap_port": 8998,
            "disaggregation_ib_device": "mlx5_0",
            "enable_deterministic_inference": False,
            "enable_kv_cache_sharding": False,
        }
        lines.append((L, f"server_args={args}"))
        lines.append((L, "Attention backend not specified. Use flashmla backend by default."))
        for r in s.ranks:
            lines.append((r, "Load weight begin. avail mem=78.61 GB"))
        for i, r in enumerate(s.ranks):
            pct = 0
            while pct < 100 and i == 0:
                pct = min(100, pct + 25)
                done = 64 * pct // 100
                lines.append(
                    (
                        r,
                        f"Loading safetensors checkpoint shards: {pct:3d}% Completed | {done}/64 "
                        f"[00:{done // 4:02d}<00:{(64 - done) // 4:02d},  4.1{i}it/s]",
                    )
                )
        for r in s.ranks:
            lines.append(
                (
                    r,
                    "Load weight end. elapsed=16.02 s, type=DeepseekV4ForCausalLM, avail mem=54.51 GB, "
                    "mem usage=24.10 GB.",
                )
            )
            lines.append((r, "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 611584, KV size: 40.01 GB"))
            lines.append((r, "Memory pool end. avail mem=14.50 GB"))
            lines.append(
                (r, "Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem=14.50 GB")
            )
            lines.append(
                (
                    r,
                    "Capture target decode CUDA graph end. bs=[1, 2, 4, 8, 16, 24, 32], elapsed=1.37 s, "
                    "mem usage=0.42 GB, avail mem=14.08 GB.",
                )
            )
        lines.append(
            (
                s.ranks[0],
                "max_total_num_tokens=611584, chunked_prefill_size=8192, max_prefill_tokens=16384, "
                "max_running_requests=2048, context_len=1048576, available_gpu_mem=14.08 GB",
            )
        )
        lines.append((L, f"INFO:     Started server process [{L.pid}]"))
        lines.append((L, "INFO:     Waiting for application startup."))
        lines.append((L, "INFO:     Application startup complete."))
        lines.append((L, f"INFO:     Uvicorn running on http://0.0.0.0:{s.port} (Press CTRL+C to quit)"))
        lines.append((L, f'INFO:     127.0.0.1:{self.rng.randint(30000, 60000)} - "GET /model_info HTTP/1.1" 200 OK'))
        lines.append((L, "The server is fired up and ready to roll!"))
        s.startup = lines
        del detok

    def _pid1_block(self) -> bytes:
        fields = {
            "_PID": "1",
            "_UID": "0",
            "_GID": "0",
            "_COMM": "systemd",
            "_EXE": "/usr/lib/systemd/systemd",
            "_CMDLINE": "/sbin/init",
            "_CAP_EFFECTIVE": "1ffffffffff",
            "_SYSTEMD_CGROUP": "/init.scope",
            "_SYSTEMD_UNIT": "init.scope",
            "_SYSTEMD_SLICE": "-.slice",
            "_TRANSPORT": "journal",
            "SYSLOG_FACILITY": "3",
            "SYSLOG_IDENTIFIER": "systemd",
            "_BOOT_ID": self.boot,
            "_MACHINE_ID": self.machine,
            "_HOSTNAME": HOST,
        }
        return "".join(f"{k}={v}\n" for k, v in fields.items()).encode()

    # --- writing -----------------------------------------------------------------------------

    def _tick(self) -> None:
        step = int(self.rng.expovariate(self.rate / 1e6)) + 1
        self.now_us += step
        self.mono_us += step

    def _prefix(self) -> str:
        sec = self.now_us // 1_000_000
        if sec != self._sec:
            self._sec = sec
            self._stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(sec))
        return self._stamp

    def line(self, out: list[bytes], p: Proc, message: str, sglang: bool = True) -> None:
        self._tick()
        if sglang:
            message = f"[{self._prefix()}{p.rank}] {message}"
        out.append(b"__REALTIME_TIMESTAMP=%d\n__MONOTONIC_TIMESTAMP=%d\n" % (self.now_us, self.mono_us))
        out.append(p.block)
        out.append(b"MESSAGE=" + message.encode() + b"\n\n")
        self.written += 1
        self.counts[p.unit] = self.counts.get(p.unit, 0) + 1

    def record(
        self,
        out: list[bytes],
        unit: str,
        message: str,
        message_id: str | None,
        priority: int,
        invocation: str,
        **extra: str,
    ) -> None:
        self._tick()
        fields = {
            "PRIORITY": str(priority),
            "MESSAGE": message,
            "UNIT": unit,
            "INVOCATION_ID": invocation,
            "CODE_FILE": "src/core/unit.c",
            "CODE_LINE": "5873",
            "CODE_FUNC": "unit_log_failure",
            "_SOURCE_REALTIME_TIMESTAMP": str(self.now_us - 17),
            **extra,
        }
        if message_id:
            fields["MESSAGE_ID"] = message_id
        out.append(b"__REALTIME_TIMESTAMP=%d\n__MONOTONIC_TIMESTAMP=%d\n" % (self.now_us, self.mono_us))
        out.append(self.pid1)
        out.append("".join(f"{k}={v}\n" for k, v in fields.items()).encode() + b"\n")
        self.written += 1
        self.counts["init.scope"] = self.counts.get("init.scope", 0) + 1

    def _noise(self, out: list[bytes], x: float) -> None:
        rng = self.rng
        if x < 0.20:  # prefill TP0 batch line or an access line
            self._serving(out, self.servers[0])
        elif x < 0.45:
            self._serving(out, self.servers[1])
        elif x < 0.55:
            status = 200 if rng.random() > 0.1 else rng.choice((503, 429))
            ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(self.now_us // 1_000_000))
            self.line(
                out,
                self.router,
                f"{ts}.{self.now_us % 1_000_000:06d}Z  INFO request{{method=POST "
                f"uri=/v1/chat/completions}}: sgl_router::middleware: finished processing request "
                f"status={status} latency={rng.randint(40, 9000)}ms request_id=chatcmpl-{_hex()[:24]}",
                False,
            )
        elif x < 0.75:
            ts = time.strftime("%m%d %H:%M:%S", time.gmtime(self.now_us // 1_000_000))
            pod = f"inference-{rng.randint(1, 40)}-{_hex()[:5]}"
            self.line(
                out,
                self.kubelet,
                rng.choice(
                    (
                        f'I{ts}.{self.now_us % 1_000_000:06d}    {self.kubelet.pid} kubelet.go:2453] "SyncLoop (PLEG): '
                        f'event for pod" pod="default/{pod}" event={{"ID":"{uuid.UUID(int=rng.getrandbits(128))}",'
                        f'"Type":"ContainerStarted","Data":"{_hex()}{_hex()}"}}',
                        f'I{ts}.{self.now_us % 1_000_000:06d}    {self.kubelet.pid} prober.go:107] "Probe failed" '
                        f'probeType="Readiness" pod="default/{pod}" podUID="{uuid.UUID(int=rng.getrandbits(128))}" '
                        f'containerName="server" probeResult="failure" output="HTTP probe failed with statuscode: 503"',
                        f"I{ts}.{self.now_us % 1_000_000:06d}    {self.kubelet.pid} kubelet_volumes.go:163] "
                        f'"Cleaned up orphaned pod volumes dir" podUID="{uuid.UUID(int=rng.getrandbits(128))}" '
                        f'path="/var/lib/kubelet/pods/{uuid.UUID(int=rng.getrandbits(128))}/volumes"',
                    )
                ),
                False,
            )
        elif x < 0.88:
            ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(self.now_us // 1_000_000))
            self.line(
                out,
                self.containerd,
                f'time="{ts}.{self.now_us % 1_000_000:06d}000Z" level=info '
                f'msg="{rng.choice(("StartContainer", "ImageCreate", "RemoveContainer", "StopPodSandbox"))} '
                f"for &ContainerMetadata{{Name:server,Attempt:{rng.randint(0, 9)},}} returns container id "
                f'\\"{_hex()}{_hex()}\\""',
                False,
            )
        else:
            ts = time.strftime("%Y/%m/%d %H:%M:%S", time.gmtime(self.now_us // 1_000_000))
            self.line(
                out,
                self.nginx,
                f"{ts} [warn] {self.nginx.pid}#{self.nginx.pid}: *{rng.randint(1, 10**7)} "
                f"an upstream response is buffered to a temporary file /var/cache/nginx/proxy_temp/"
                f"{rng.randint(0, 9)}/{rng.randint(10, 99)}/{rng.randint(10**9, 10**10)} while reading upstream,"
                f" client: 10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}, server: _, "
                f'request: "POST /v1/chat/completions HTTP/1.1", upstream: "http://127.0.0.1:8000/v1/chat/'
                f'completions", host: "llm.internal"',
                False,
            )

    def _serving(self, out: list[bytes], s: Server) -> None:
        rng = self.rng
        if s.startup:
            p, msg = s.startup.pop(0)
            self.line(out, p, msg)
            return
        assert s.launcher is not None
        if rng.random() < 0.3:
            self.line(
                out, s.launcher, f'INFO:     127.0.0.1:{rng.randint(30000, 60000)} - "POST /generate HTTP/1.1" 200 OK'
            )
            return
        usage = rng.uniform(0.05, 0.4)
        running = rng.randint(8, 64)
        if s.mode == "prefill":
            msg = (
                f"Prefill batch, #new-seq: {rng.randint(1, 8)}, #new-token: {rng.choice((2048, 4096, 8192))}, "
                f"#cached-token: {rng.randint(0, 4096)}, full token usage: {usage:.2f}, swa token usage: "
                f"{usage * 0.6:.2f}, #running-req: {running}, #queue-req: 0, #pending-token: 0, #bootstrap-req: 0,"
                f" #inflight-req: 0, #optimistic-req: 0, cuda graph: False, input throughput (token/s): "
                f"{rng.uniform(8000, 30000):.2f}"
            )
        else:
            used = int(611584 * usage)
            msg = (
                f"Decode batch, #running-req: {running}, #full token: {used}, full token usage: {usage:.2f}, "
                f"#swa token: {used // 3}, swa token usage: {usage * 0.6:.2f}, pre-allocated usage: 0.00, "
                f"#prealloc-req: 0, #transfer-req: 0, #retracted-req: 0, cuda graph: True, gen throughput "
                f"(token/s): {rng.uniform(900, 2400):.2f}, #queue-req: 0"
            )
        self.line(out, s.ranks[0], msg)

    def _crash(self, out: list[bytes], s: Server) -> None:
        sig_id, text = self.rng.choice(self.errors)
        assert s.launcher is not None
        wrapped = "hit an exception" in text
        body, _, tail = text.partition("\n\n")
        lines = body.splitlines()
        procs = s.ranks if wrapped else [s.launcher]
        for p in procs:
            for ln in lines:
                m = _PREFIX.match(ln)
                if m is not None:
                    ln = f"[{self._prefix()}{p.rank}] " + ln[m.end() :]
                self.line(out, p, ln, sglang=False)
        if wrapped:
            self.line(out, s.launcher, "Received sigquit from a child process. It usually means the child failed.")
        for ln in tail.splitlines():
            if ln.strip() and "sigquit" not in ln.lower():
                m = _PREFIX.match(ln)
                self.line(out, s.launcher, ln if m is None else f"[{self._prefix()}] " + ln[m.end() :], sglang=False)
        inv = s.invocation
        u = s.unit
        if wrapped:
            self.record(
                out,
                u,
                f"{u}: Main process exited, code=killed, status=9/KILL",
                MSG_EXITED,
                5,
                inv,
                EXIT_CODE="killed",
                EXIT_STATUS="9",
                COMMAND="ExecStart",
            )
            self.record(out, u, f"{u}: Failed with result 'signal'.", MSG_FAILED, 4, inv, UNIT_RESULT="signal")
        else:
            self.record(
                out,
                u,
                f"{u}: Main process exited, code=exited, status=1/FAILURE",
                MSG_EXITED,
                5,
                inv,
                EXIT_CODE="exited",
                EXIT_STATUS="1",
                COMMAND="ExecStart",
            )
            self.record(out, u, f"{u}: Failed with result 'exit-code'.", MSG_FAILED, 4, inv, UNIT_RESULT="exit-code")
        self.record(
            out, u, f"{u}: Consumed 2min 31.204s CPU time.", MSG_CONSUMED, 6, inv, CPU_USAGE_NSEC="151204000000"
        )
        self.crashes.append({"unit": u, "signature": sig_id, "invocation": inv, "at": self.now_us / 1e6})
        s.restarts += 1
        self.record(
            out,
            u,
            f"{u}: Scheduled restart job, restart counter is at {s.restarts}.",
            MSG_RESTART,
            6,
            inv,
            N_RESTARTS=str(s.restarts),
        )
        self.record(out, u, f"Stopped {s.description}.", MSG_STOPPED, 6, inv, JOB_TYPE="restart", JOB_RESULT="done")
        self._start_server(s)
        self.record(
            out, u, f"Started {s.description}.", MSG_STARTED, 6, s.invocation, JOB_TYPE="start", JOB_RESULT="done"
        )

    def generate(self, sink) -> None:
        """Write `entries` entries in export format to `sink` (a binary file)."""
        rng = self.rng
        out: list[bytes] = []
        for s in self.servers:
            self._start_server(s)
            self.record(
                out,
                s.unit,
                f"Started {s.description}.",
                MSG_STARTED,
                6,
                s.invocation,
                JOB_TYPE="start",
                JOB_RESULT="done",
            )
        next_crash = int(rng.uniform(*self.crash_every))
        rnd = rng.random
        w = self.watched
        if w != WATCHED:  # the SGLang units get [0, w) of the draws, the neighbours the rest, each mix unchanged

            def rnd() -> float:
                x = rng.random()
                return x * WATCHED / w if x < w else WATCHED + (x - w) * (1 - WATCHED) / (1 - w)

        while self.written < self.entries:
            if self.written >= next_crash and self.written + 200 < self.entries:
                self._crash(out, rng.choice(self.servers))
                next_crash = self.written + int(rng.uniform(*self.crash_every))
            else:
                self._noise(out, rnd())
            if len(out) > 3000:
                sink.write(b"".join(out))
                out.clear()
        sink.write(b"".join(out))


_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?(?: [^\]\s]+)*\] ?")


def _crash_texts(lib) -> list[tuple[str, str]]:
    """(signature id, example traceback) for the library's traceback signatures that need no context."""
    out = []
    for sig in lib.signatures:
        if sig.kind != "traceback" or sig.context or sig.severity != "critical":
            continue
        for ex in sig.examples:
            if "Traceback (most recent call last)" in ex.text and not ex.context:
                out.append((sig.id, ex.text.strip("\n")))
                break
    if not out:
        raise RuntimeError("the signature library has no traceback examples to crash with")
    return out


def boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")


@dataclass
class JournalSet:
    folder: Path
    files: list[Path]
    meta: dict[str, object]


def build(
    entries: int,
    seed: int = 7,
    folder: Path | None = None,
    force: bool = False,
    crash_every: tuple[int, int] = (14_000, 26_000),
    watched: float = WATCHED,
) -> JournalSet:
    """The journal of `entries` entries (a crash every `crash_every` entries, the SGLang units `watched` of
    them), generated once and cached."""
    if JOURNAL_REMOTE is None:
        raise RuntimeError("systemd-journal-remote is missing: scripts/install-debs.sh systemd-journal-remote")
    share = "" if watched == WATCHED else f"-w{round(watched * 100)}"
    folder = folder or DATA / f"journal-{entries}-s{seed}-v{VERSION}{share}"
    meta_path = folder / "meta.json"
    if meta_path.exists() and not force:
        meta = json.loads(meta_path.read_text())
        if (
            meta.get("boot_id") == boot_id()
            and meta.get("crash_every", [14_000, 26_000]) == list(crash_every)
            and meta.get("watched", WATCHED) == watched
        ):
            return JournalSet(folder, sorted(folder.glob("*.journal")), meta)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    gen = Generator(entries, seed, boot_id(), crash_every=crash_every, watched=watched)
    log(f"generating {entries:,} journal entries into {folder} (systemd-journal-remote) ...")
    started = time.monotonic()
    remote = subprocess.Popen(
        [JOURNAL_REMOTE, "--split-mode=none", f"--output={folder}/bench.journal", "-"],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert remote.stdin is not None
    try:
        gen.generate(remote.stdin)
    finally:
        remote.stdin.close()
    err = remote.stderr.read().decode(errors="replace") if remote.stderr else ""
    if remote.wait() != 0:
        raise RuntimeError(f"systemd-journal-remote failed: {err[-2000:]}")
    files = sorted(folder.glob("*.journal"))
    meta = {
        "entries": gen.written,
        "seed": seed,
        "version": VERSION,
        "boot_id": gen.boot,
        "by_unit": gen.counts,
        "crashes": gen.crashes,
        "crash_every": list(crash_every),
        "watched": watched,
        "files": len(files),
        "bytes": sum(f.stat().st_size for f in files),
        "seconds": round(time.monotonic() - started, 1),
    }
    meta_path.write_text(json.dumps(meta, indent=1))
    log(
        f"  {gen.written:,} entries, {len(gen.crashes)} crashes, {len(files)} files, "
        f"{meta['bytes'] / 1e6:.0f} MB in {meta['seconds']} s"
    )
    return JournalSet(folder, files, meta)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--entries", type=int, default=2_000_000)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", type=Path, help="folder (default: bench/data/journal-N-sSEED-vV)")
    p.add_argument("--export", action="store_true", help="write the export stream to stdout instead")
    p.add_argument("--watched", type=float, default=WATCHED, help="the SGLang units' share of the entries")
    p.add_argument("--force", action="store_true")
    a = p.parse_args(argv)
    if a.export:
        Generator(a.entries, a.seed, boot_id(), watched=a.watched).generate(sys.stdout.buffer)
        return 0
    js = build(a.entries, a.seed, a.out, a.force, watched=a.watched)
    print(js.folder)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
