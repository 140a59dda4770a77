"""A real Prometheus server for tests: scrapes given /metrics URLs every second.

Uses the Debian ``prometheus`` package (``/usr/bin/prometheus``; ``make system-deps`` installs
it). Storage lives in a temporary directory; the server listens on a free loopback port.

    with PrometheusServer(["http://127.0.0.1:8080/metrics"], workdir) as prom:
        prom.wait_for_targets_up()
        prom.query('rolloutbatch_build_info')   # -> list of {"metric": {...}, "value": [t, "1"]}
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

PROMETHEUS_BIN = "/usr/bin/prometheus"


def prometheus_binary() -> str | None:
    """The prometheus binary, or None when it is not installed."""
    if Path(PROMETHEUS_BIN).exists():
        return PROMETHEUS_BIN
    return shutil.which("prometheus")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


OPERATOR_NAMESPACE = "rolloutbatch-system"
SERVICEMONITOR = Path(__file__).resolve().parents[2] / "manifests" / "monitoring" / "servicemonitor.yaml"


def servicemonitor_honors_labels() -> bool:
    (endpoint,) = yaml.safe_load(SERVICEMONITOR.read_text())["spec"]["endpoints"]
    return endpoint.get("honorLabels") is True


class PrometheusServer:
    def __init__(self, metrics_urls: list[str], workdir: Path, scrape_interval: str = "1s"):
        self.metrics_urls = metrics_urls
        self.workdir = Path(workdir)
        self.scrape_interval = scrape_interval
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.workdir / "prometheus.log"

    def config(self) -> dict[str, Any]:
        targets, paths = [], set()
        for u in self.metrics_urls:
            p = urllib.parse.urlsplit(u)
            targets.append(p.netloc)
            paths.add(p.path or "/metrics")
        if len(paths) != 1:
            raise ValueError(f"all targets must share one metrics path, got {paths}")
        return {
            "global": {"scrape_interval": self.scrape_interval,
                       "evaluation_interval": self.scrape_interval},
            "scrape_configs": [{
                "job_name": "rolloutbatch",
                "scrape_interval": self.scrape_interval,
                "scrape_timeout": self.scrape_interval,
                "metrics_path": paths.pop(),
                # As the Prometheus Operator scrapes through the shipped ServiceMonitor: its
                # honorLabels, and the target's own `namespace` label (the operator's).
                "honor_labels": servicemonitor_honors_labels(),
                "static_configs": [{"targets": targets, "labels": {"namespace": OPERATOR_NAMESPACE}}],
            }],
        }

    def start(self) -> "PrometheusServer":
        binary = prometheus_binary()
        if binary is None:
            raise RuntimeError("prometheus is not installed (apt-get install prometheus)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        cfg = self.workdir / "prometheus.yml"
        cfg.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        (self.workdir / "data").mkdir(exist_ok=True)
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={cfg}", f"--storage.tsdb.path={self.workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1d",
             "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
        )
        log.close()
        self._wait(lambda: self._get("/-/ready") is not None, 60, "Prometheus to become ready")
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> "PrometheusServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- HTTP API -------------------------------------------------------------------------------

    def _get(self, path: str, params: dict[str, str] | None = None) -> bytes | None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"prometheus exited ({self.proc.returncode}): {self.log_tail()}")
        url = self.url + path + ("?" + urllib.parse.urlencode(params) if params else "")
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return r.read()
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None

    def api(self, path: str, params: dict[str, str] | None = None) -> Any:
        body = self._get(path, params)
        if body is None:
            raise RuntimeError(f"Prometheus API {path} unreachable")
        doc = json.loads(body)
        if doc.get("status") != "success":
            raise RuntimeError(f"Prometheus API {path} {params}: {doc}")
        return doc["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query; the vector/matrix result list (scalars are wrapped in a list)."""
        data = self.api("/api/v1/query", {"query": expr})
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def targets(self) -> list[dict[str, Any]]:
        return self.api("/api/v1/targets")["activeTargets"]

    def wait_for_targets_up(self, timeout: float = 60) -> None:
        self._wait(lambda: (t := self.targets()) and all(x["health"] == "up" for x in t),
                   timeout, "every scrape target to be up")

    def wait_for(self, expr: str, timeout: float = 60) -> list[dict[str, Any]]:
        """Poll an instant query until it returns at least one sample."""
        result: list[dict[str, Any]] = []

        def ok() -> bool:
            nonlocal result
            result = self.query(expr)
            return bool(result)

        self._wait(ok, timeout, f"data for {expr!r}")
        return result

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def _wait(self, cond: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if cond():
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}; prometheus log:\n{self.log_tail()}")
            time.sleep(0.5)


def sample_value(result: list[dict[str, Any]]) -> float:
    """The single value of an instant-query result with exactly one series."""
    if len(result) != 1:
        raise AssertionError(f"expected one series, got {result}")
    return float(result[0]["value"][1])
