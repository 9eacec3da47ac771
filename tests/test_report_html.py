"""report.html: self-contained, escaped, interactive; rendered in headless Chromium.

The browser test drives Chromium through the DevTools protocol over ``--remote-debugging-pipe``
(file descriptors 3 and 4, NUL-separated JSON), so no websocket library is needed. It skips with
a reason when Chromium is not installed (``.ci/run`` installs the Debian package).
"""

from __future__ import annotations

import atexit
import base64
import fcntl
import json
import os
import re
import select
import shutil
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import shared_file
from pytest_gemmperf.report import write_reports
from pytest_gemmperf.report.html import render_html
from pytest_gemmperf.report.data import build_report_data
from pytest_gemmperf.traces.schema import finalize_dispatches

NASTY = 'void ck::kernel_gemm<ck::tensor_operation::Op<float, "q">, 256, &foo::bar>(int*, a<b && c>d)'
XSS = "<script>alert(1)</script>_gemm"
FORMULA = "=HYPERLINK(\"http://x\")_gemm"


# ---------------------------------------------------------------------------------------------
# synthetic sweep


def _sweep(seed: int = 0, slow_kernel: str | None = None, factor: float = 1.0,
           points=("ch28-th256", "ch56-th256", "ch28-th512", "ch56-th512"), ranks=(0, 1),
           n_per_kernel: int = 60) -> pd.DataFrame:
    """A small multi-point, multi-rank sweep with GEMMs overlapping a collective."""
    rng = np.random.default_rng(seed)
    kernels = [("Cijk_Ailk_Bljk_HHS_BH_MT128x128x64_MI32x32x8", 12_000), (NASTY, 30_000),
               (XSS, 8_000), (FORMULA, 9_000), ("ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)", 200_000),
               ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", 3_000)]
    rows = []
    for p in points:
        for r in ranks:
            for run in range(3):
                t = 1_000_000
                for i in range(n_per_kernel):
                    for name, dur in kernels:
                        scale = factor if name == slow_kernel else 1.0
                        d = int(dur * scale * rng.lognormal(0, 0.05))
                        queue = 2 if name.startswith("nccl") else 1
                        start = t if queue == 1 else t - 50_000
                        rows.append((p, r, run, name, start, start + d, queue))
                        if queue == 1:
                            t = start + d + 500
    df = pd.DataFrame(rows, columns=["point", "rank", "run", "kernel", "start_ns", "end_ns", "queue"])
    df["host"] = "h"
    df["pid"] = 100 + df["rank"] * 10 + df["run"]
    df["source"] = "rocprofv3-json"
    return finalize_dispatches(df, "synthetic")


@pytest.fixture(scope="module")
def compared():
    from pytest_gemmperf.gate.compare import compare
    from pytest_gemmperf.gate.samples import samples_from_dispatches

    base = _sweep(0)
    cand = _sweep(1, slow_kernel=NASTY, factor=1.3)
    v = compare(samples_from_dispatches(base), samples_from_dispatches(cand), test="t.py::test_x")
    return base, cand, v


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.scripts: list[str] = []
        self.text: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self._in_script = tag == "script"
        for name, value in attrs:
            if name in ("src", "href") and value and not value.startswith("#"):
                raise AssertionError(f"external reference {name}={value!r}")

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        (self.scripts if self._in_script else self.text).append(data)


def test_html_is_self_contained_and_escaped(tmp_path, compared):
    base, cand, v = compared
    files = write_reports(tmp_path, dispatches=cand, verdicts=v, formats=["html"])
    html = files["report.html"].read_text(encoding="utf-8")
    parser = _Collect()
    parser.feed(html)
    # exactly our one inline script: the kernel named <script>... is text, not a tag
    assert parser.tags.count("script") == 1
    assert XSS not in html and "&lt;script&gt;alert(1)&lt;/script&gt;_gemm" in html
    text = "".join(parser.text)
    assert NASTY in text  # angle brackets, ampersands and quotes survive as text
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", html.replace(FORMULA.split('"')[1], ""))
    assert "REGRESSION" in text


def test_html_sections_and_verdict_rows(tmp_path, compared):
    base, cand, v = compared
    data = build_report_data(cand, verdicts=v)
    html = render_html(data)
    for section in ("regressions", "distributions", "overlap", "counters", "variance", "kernels", "meta"):
        assert f'id="{section}"' in html
    # every axis of the sweep has its own distribution plot
    for title in ("by threads", "by channels", "by rank"):
        assert f"<h3>{title}</h3>" in html
    assert "thread x channel interaction" in html  # SVG title of the interaction plot
    n_rows = html.count('<tr class="') - 0
    assert n_rows == len(v)
    # regression rows come first
    first = re.search(r'<tr class="(\w+)" data-verdict', html).group(1)
    assert first == "regression"


def test_html_analysis_only_without_verdicts(tmp_path):
    d = _sweep(0, points=("th256",), ranks=(0,), n_per_kernel=20)
    html = render_html(build_report_data(d))
    assert "ANALYSIS ONLY" in html and "No baseline was compared" in html


def test_nway_compare_shows_every_sweep(tmp_path, compared):
    base, cand, v = compared
    cand2 = _sweep(2, slow_kernel=NASTY, factor=0.8)
    v2 = v.assign(label="c1")
    v3 = v.assign(label="c2")
    files = write_reports(tmp_path, dispatches=[base, cand, cand2], labels=["base", "c1", "c2"],
                          verdicts=pd.concat([v2, v3]), formats=["html", "csv"])
    html = files["report.html"].read_text(encoding="utf-8")
    assert "base, c1, c2" in html and "(first = baseline)" in html
    kernels = pd.read_csv(files["kernels.csv"])
    assert set(kernels["label"]) == {"base", "c1", "c2"}


# ---------------------------------------------------------------------------------------------
# headless Chromium over the DevTools pipe


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class _Browser:
    """One headless Chromium per test process, shared by every :class:`DevTools` page: starting
    the browser costs about 0.8 s, a new page in it 0.05 s."""

    def __init__(self, exe: str, profile: Path) -> None:
        self.exe = exe
        to_browser_r, self._w = os.pipe()
        self._r, from_browser_w = os.pipe()
        args = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-extensions", "--disable-dev-shm-usage", "--remote-debugging-pipe",
                f"--user-data-dir={profile}", "about:blank"]

        def wire() -> None:  # the browser reads commands on fd 3 and writes replies on fd 4
            # via descriptors >= 10 first: the pipes may themselves be 3..6, and dup2 onto the
            # same number would keep close-on-exec
            r = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)
            w = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(r, 3)
            os.dup2(w, 4)

        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, preexec_fn=wire,
                                     # close_fds would run after preexec_fn and close 3 and 4;
                                     # Python's own descriptors are non-inheritable anyway
                                     close_fds=False)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buf = b""
        self._id = 0

    def alive(self) -> bool:
        return self.proc.poll() is None

    def write(self, msg: dict) -> int:
        self._id += 1
        os.write(self._w, json.dumps({"id": self._id, **msg}).encode() + b"\0")
        return self._id

    def read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no reply from Chromium")
            ready, _, _ = select.select([self._r], [], [], left)
            if ready:
                chunk = os.read(self._r, 1 << 20)
                if not chunk:
                    raise RuntimeError("Chromium closed the DevTools pipe")
                self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def shutdown(self) -> None:
        try:
            self.write({"method": "Browser.close", "params": {}})
        except OSError:  # the browser may already be gone
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._r, self._w):
            try:
                os.close(fd)
            except OSError:
                pass


_BROWSER: _Browser | None = None


def _shared_browser(exe: str, profile: Path) -> _Browser:
    """The process's browser, started on first use (``profile``: its user data directory) and
    closed when the process exits; a browser that died is replaced."""
    global _BROWSER
    if _BROWSER is None or not _BROWSER.alive() or _BROWSER.exe != exe:
        _BROWSER = _Browser(exe, profile)
        atexit.register(_BROWSER.shutdown)
    return _BROWSER


class DevTools:
    """Minimal DevTools-protocol client over ``--remote-debugging-pipe``: one page of the shared
    browser. It sees only its own page's events (a page closed earlier can still send some) and
    ``close()`` closes the pages it opened, not the browser."""

    def __init__(self, exe: str, profile: Path) -> None:
        self._browser = _shared_browser(exe, profile)
        self.events: list[dict] = []
        self.session: str | None = None
        self._targets: list[str] = []

    def _keep(self, message: dict) -> None:
        if message.get("sessionId") in (None, self.session):
            self.events.append(message)

    def send(self, method: str, params: dict | None = None, *, session: bool = True,
             timeout_s: float = 30.0) -> dict:
        msg: dict = {"method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        sent = self._browser.write(msg)
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self._browser.read_message(deadline)
            if reply.get("id") == sent:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result = reply.get("result", {})
                if method == "Target.createTarget":
                    self._targets.append(result["targetId"])
                return result
            if "id" not in reply:  # an event; a late reply to an earlier page's call is dropped
                self._keep(reply)

    def wait_event(self, method: str, timeout_s: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout_s
        for e in self.events:
            if e.get("method") == method:
                return e
        while True:
            e = self._browser.read_message(deadline)
            if "id" in e:
                continue
            self._keep(e)
            if e.get("method") == method and e.get("sessionId") in (None, self.session):
                return e

    def open(self, url: str, width: int = 1280, height: int = 900) -> None:
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session=False)["sessionId"]
        for domain in ("Page.enable", "Runtime.enable", "Log.enable"):
            self.send(domain)
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        self.send("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired")

    def evaluate(self, expression: str):
        res = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                             "awaitPromise": True})
        if "exceptionDetails" in res:
            raise AssertionError(f"JS error: {res['exceptionDetails']}")
        return res["result"].get("value")

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and browser log errors (CSP, failed loads)."""
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append(json.dumps(p.get("exceptionDetails", {}))[:300])
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(json.dumps(p.get("args", []))[:300])
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(p["entry"].get("text", "")[:300])
        return out

    def screenshot(self, path: Path, full_page: bool = False) -> None:
        params: dict = {"format": "png"}
        if full_page:
            h = self.evaluate("document.documentElement.scrollHeight")
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": 1280, "height": min(int(h), 16000), "scale": 1})
        data = self.send("Page.captureScreenshot", params)["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        for target in self._targets:
            try:
                self.send("Target.closeTarget", {"targetId": target}, session=False, timeout_s=5)
            except (OSError, RuntimeError, TimeoutError):  # the page or the browser may be gone
                pass
        self._targets.clear()
        self.session = None


def _real_908_report(out: Path) -> tuple[Path, str]:
    """Report of the real 908 trace, compared against itself with one templated kernel 30 %
    slower; the run is cut into four pseudo-processes (quarters in time) for the gate."""
    from pytest_gemmperf.gate.compare import compare
    from pytest_gemmperf.gate.samples import samples_from_dispatches
    from pytest_gemmperf.traces.discover import load

    trace = load(shared_file("tracelens/908_results.json.gz"))
    d = trace.dispatches
    order = np.argsort(d["start_ns"].to_numpy(), kind="stable")
    run = np.empty(len(d), dtype=np.int64)
    run[order] = np.arange(len(d)) * 4 // len(d)
    base = d.assign(run=pd.array(run, dtype="Int64"))
    names = base["kernel"].astype(str)
    # the most frequent reduction: a stable kernel whose name has <, >, & and :: in it
    counts = names[names.str.startswith("void at::native::reduce_kernel<")].value_counts()
    slow = counts.index[0]
    hit = (names == slow).to_numpy()
    cand = base.copy()
    cand.loc[hit, "end_ns"] = cand.loc[hit, "start_ns"] + (cand.loc[hit, "dur_ns"] * 1.3).astype("int64")
    cand["dur_ns"] = cand["end_ns"] - cand["start_ns"]
    v = compare(samples_from_dispatches(base), samples_from_dispatches(cand), test="908::aorta_train")
    assert (v.loc[v["kernel"] == slow, "verdict"] == "regression").any(), "fixture lost its regression"
    files = write_reports(out, dispatches=cand, verdicts=v, agents=trace.agents,
                          meta={"rocm_version": "7.x (layout of the trace)", "commit": "908-fixture",
                                "inputs": [str(shared_file("tracelens/908_results.json.gz"))]},
                          formats=["html"])
    return files["report.html"], slow


@pytest.mark.slow  # the real 43,915-dispatch trace in a browser
@pytest.mark.skipif(_chromium() is None, reason="Chromium not installed (Debian package 'chromium'; "
                                                "installed by .ci/run)")
def test_real_908_report_in_headless_chromium(tmp_path, shared_data):
    html_path, slow = _real_908_report(tmp_path / "report")
    assert html_path.stat().st_size < 5_000_000
    browser = DevTools(_chromium(), tmp_path / "profile")
    try:
        browser.open(html_path.resolve().as_uri())
        text = browser.evaluate("document.body.innerText")
        assert "REGRESSION" in browser.evaluate("document.getElementById('banner').innerText")
        # the full kernel name with its angle brackets, as text: in the cell's tooltip and,
        # once the short label is expanded, on the page (the table shows short labels)
        assert slow not in text
        cell = ("Array.from(document.querySelectorAll('#verdict-table td.k'))"
                f".find(td => td.title === {json.dumps(slow)})")
        assert browser.evaluate(f"!!{cell}")
        browser.evaluate(f"{cell}.querySelector('summary').click()")
        assert slow in browser.evaluate("document.body.innerText")
        browser.evaluate(f"{cell}.querySelector('summary').click()")
        assert browser.evaluate("document.querySelectorAll('script').length") == 1
        assert "AMD Instinct MI350X" in text

        rows_js = "Array.from(document.querySelectorAll('#verdict-table tbody tr'))"
        n = browser.evaluate(f"{rows_js}.length")
        assert n > 50
        # sort by the change (descending after two clicks): numbers in order, regression on top
        col = browser.evaluate("Array.from(document.querySelectorAll('#verdict-table thead th'))"
                               ".findIndex(th => th.innerText.trim().startsWith('change'))")
        click = f"document.querySelectorAll('#verdict-table thead th')[{col}].querySelector('button').click()"
        browser.evaluate(click)
        asc = browser.evaluate(f"{rows_js}.map(r => r.cells[{col}].getAttribute('data-v'))"
                               ".filter(v => v !== '').map(Number)")
        assert asc == sorted(asc) and len(asc) > 10
        browser.evaluate(click)
        desc = browser.evaluate(f"{rows_js}.map(r => r.cells[{col}].getAttribute('data-v'))"
                                ".filter(v => v !== '').map(Number)")
        assert desc == sorted(desc, reverse=True)
        assert browser.evaluate(f"{rows_js}[0].getAttribute('data-verdict')") == "regression"
        # filter by text (part of the templated kernel name) and by verdict
        needle = slow[:40]
        browser.evaluate("var f = document.getElementById('verdict-filter'); f.value = "
                         f"{json.dumps(needle)}; f.dispatchEvent(new Event('input'));")
        # textContent: the full name sits in the (collapsed) details of the kernel cell
        visible = browser.evaluate(f"{rows_js}.filter(r => !r.hidden).map(r => r.textContent)")
        assert visible and all(needle in row for row in visible)
        assert len(visible) < n
        browser.evaluate("var f = document.getElementById('verdict-filter'); f.value = '';"
                         "f.dispatchEvent(new Event('input'));"
                         "var s = document.getElementById('verdict-select'); s.value = 'regression';"
                         "s.dispatchEvent(new Event('change'));")
        verdicts = browser.evaluate(f"{rows_js}.filter(r => !r.hidden).map(r => r.getAttribute('data-verdict'))")
        assert verdicts and set(verdicts) == {"regression"}
        assert "of" in browser.evaluate("document.getElementById('verdict-count').innerText")
        browser.evaluate("var s = document.getElementById('verdict-select'); s.value = '';"
                         "s.dispatchEvent(new Event('change')); window.scrollTo(0, 0);")
        shot = Path(os.environ.get("GEMMPERF_SCREENSHOT_DIR", tmp_path)) / "report_908.png"
        browser.screenshot(shot)
        assert shot.stat().st_size > 10_000
        browser.screenshot(shot.with_name("report_908_full.png"), full_page=True)
        assert browser.errors() == []
    finally:
        browser.close()


def test_cli_compare_nway_writes_one_report(tmp_path, capsys):
    """gemmperf compare BASE C1 C2 --labels: verdicts per candidate, one report with all sweeps."""
    from pytest_gemmperf.cli import main

    paths = []
    for name, (seed, factor) in {"base": (0, 1.0), "c1": (1, 1.3), "c2": (2, 1.0)}.items():
        d = tmp_path / name
        d.mkdir()
        _sweep(seed, slow_kernel=NASTY, factor=factor, points=("ch28-th256", "ch56-th256"),
               n_per_kernel=30).to_parquet(d / "dispatches.parquet")
        paths.append(str(d))
    out = tmp_path / "out"
    rc = main(["compare", *paths, "--labels", "slow", "same", "--out", str(out)])
    assert rc == 1  # the 'slow' candidate regresses
    printed = capsys.readouterr().out
    assert f"report: {out / 'report.html'}" in printed
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "base, slow, same" in html
    v = pd.read_csv(out / "verdicts.csv", keep_default_na=False)
    assert set(v["label"]) == {"slow", "same"}
    reg = v[v["verdict"] == "regression"]
    assert set(reg["label"]) == {"slow"} and NASTY in set(reg["kernel"])
    assert (out / "report.xlsx").is_file() and (out / "summary.md").is_file()
    k = pd.read_csv(out / "kernels.csv")
    assert set(k["label"]) == {"base", "slow", "same"}


@pytest.mark.slow  # a real browser
@pytest.mark.skipif(_chromium() is None, reason="Chromium not installed (Debian package 'chromium'; "
                                                "installed by .ci/run)")
def test_telemetry_panel_in_headless_chromium(tmp_path):
    """A point whose (double) GPU throttles during process 2 of 4: the panel renders an SVG
    with a shaded interval and process bands, the summary table marks process 2, no errors."""
    from telemetry_doubles import fake_pynvml
    from pytest_gemmperf.report.telemetry import read_results_telemetry
    from pytest_gemmperf.run.telemetry import TelemetrySampler, summarise, write_telemetry
    from pytest_gemmperf.run.telemetry_sources import HostSource, NvmlSource

    state: dict = {}
    s = TelemetrySampler(0.02, sources=[HostSource(), NvmlSource(module=fake_pynvml(state))])
    with s:
        for k in range(4):
            # the state flips between windows (with a gap), so no sample of another process
            # can see process 2's throttling
            state.update(throttle=k == 2, sm_mhz=1400 if k == 2 else 1980)
            time.sleep(0.05)
            with s.process(k):
                time.sleep(0.25)
    point_dir = tmp_path / "res" / "t.py__test_x" / "ch28-th256"
    point_dir.mkdir(parents=True)
    write_telemetry(point_dir, s.frame())
    (point_dir / "point.json").write_text(json.dumps(
        {"test_id": "t.py::test_x", "point": "ch28-th256",
         "telemetry": {**s.metadata(), "summary": summarise(s.frame(), s.windows, s.interval_s)}}))
    files = write_reports(tmp_path / "report", dispatches=_sweep(), formats=["html"],
                          telemetry=read_results_telemetry(tmp_path / "res"))
    browser = DevTools(_chromium(), tmp_path / "profile")
    try:
        browser.open(files["report.html"].resolve().as_uri())
        assert browser.evaluate("document.querySelectorAll('#telemetry svg').length") == 1
        assert browser.evaluate("document.querySelectorAll('#telemetry svg polyline').length") >= 3
        tips = browser.evaluate("Array.from(document.querySelectorAll('#telemetry svg rect title'))"
                                ".map(t => t.textContent)")
        assert any(t.startswith("gpu0 throttled") for t in tips)
        assert sum(t.startswith("process ") for t in tips) == 4
        rows = browser.evaluate("Array.from(document.querySelectorAll('#telemetry .telemetry-table tbody tr'))"
                                ".map(r => [r.className, r.cells[0].innerText, r.cells[1].innerText])")
        assert ["throttled", "2", "gpu0"] in rows
        assert not any(r[0] == "throttled" and r[1] != "2" for r in rows)
        assert browser.evaluate("document.getElementById('telemetry').getBoundingClientRect().height") > 200
        assert browser.errors() == []
    finally:
        browser.close()
