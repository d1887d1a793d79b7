"""Open a page in headless Chromium and report what a person would see: console errors,
uncaught exceptions, blocked loads, values read from the DOM, and a screenshot.

    with Chromium() as browser:
        page = browser.open("report.html")
        page.errors          # every console error / exception / error log entry, as text
        page.evaluate("document.querySelectorAll('svg').length")
        page.screenshot("report.png", width=1280)

Speaks the DevTools protocol over --remote-debugging-pipe (NUL-separated JSON on fds 3 and 4),
so it needs nothing but the Debian `chromium` package and the standard library: no WebDriver,
no browser download, no port. Used by tests/analyze/test_report.py and scripts/screenshot_report.py.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

BINARIES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    for name in BINARIES:
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass(kw_only=True, slots=True)
class Page:
    browser: Chromium
    session: str
    errors: list[str] = field(default_factory=list)
    """Console errors (console.error), uncaught exceptions, and error log entries (blocked loads,
    CSP violations, failed resources), in the order they came."""

    def evaluate(self, expression: str):
        """The JSON value of a JavaScript expression evaluated in the page."""
        res = self.browser.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, self.session)
        if "exceptionDetails" in res:
            raise RuntimeError(f"{expression}: {res['exceptionDetails'].get('text')}")
        return res["result"].get("value")

    def screenshot(
        self, path: str, width: int = 1280, max_height: int | None = None, until: str | None = None
    ) -> tuple[int, int]:
        """A PNG of the page at `width` CSS pixels: all of it, or down to the bottom of the element
        matching the CSS selector `until`, at most max_height pixels; returns its size."""
        self.browser.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": 800, "deviceScaleFactor": 1, "mobile": False},
            self.session,
        )
        height = int(self.evaluate("document.documentElement.scrollHeight"))
        if until:
            bottom = self.evaluate(
                f"document.querySelector({json.dumps(until)}).getBoundingClientRect().bottom + window.scrollY"
            )
            height = min(height, int(bottom) + 24)
        if max_height:
            height = min(height, max_height)
        res = self.browser.call(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
            },
            self.session,
        )
        with open(path, "wb") as f:
            f.write(base64.b64decode(res["data"]))
        return width, height


class Chromium:
    """One headless Chromium process, driven over a pipe; a context manager."""

    def __init__(self, binary: str | None = None, timeout: float = 30.0):
        self.binary = binary or find_chromium()
        if self.binary is None:
            raise FileNotFoundError("no chromium on PATH (Debian: apt-get install chromium)")
        self.timeout = timeout
        self._next_id = 0
        self._buffer = b""
        self._pending: list[dict] = []

    def __enter__(self) -> Chromium:
        self._profile = tempfile.mkdtemp(prefix="commtrace-chromium-")
        to_child, self._write = os.pipe()
        self._read, from_child = os.pipe()

        def wire_fds() -> None:  # in the child: Chromium reads commands on fd 3, answers on fd 4
            a, b = os.dup(to_child), os.dup(from_child)  # dup first: the pipe ends may be fds 3 / 4
            os.dup2(a, 3)
            os.dup2(b, 4)

        self._proc = subprocess.Popen(
            [
                self.binary,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-extensions",
                "--no-first-run",
                "--no-default-browser-check",
                "--remote-debugging-pipe",
                f"--user-data-dir={self._profile}",
                "about:blank",
            ],
            preexec_fn=wire_fds,
            close_fds=False,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_child)
        os.close(from_child)
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.call("Browser.close")
        except (OSError, EOFError, TimeoutError, RuntimeError):
            pass
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        os.close(self._write)
        os.close(self._read)
        shutil.rmtree(self._profile, ignore_errors=True)

    def _send(self, method: str, params: dict | None, session: str | None) -> int:
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._write, json.dumps(msg).encode() + b"\0")
        return self._next_id

    def _messages(self, deadline: float):
        """Every message Chromium sends until the deadline (TimeoutError after it)."""
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                yield json.loads(raw)
            ready, _, _ = select.select([self._read], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._read, 1 << 20)
            if not chunk:
                raise EOFError("chromium exited")
            self._buffer += chunk

    def _wait_for(self, match, timeout: float | None = None) -> dict:
        for msg in self._messages(time.monotonic() + (timeout or self.timeout)):
            if match(msg):
                return msg
            self._pending.append(msg)  # events seen while waiting: kept for the page's errors

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        i = self._send(method, params, session)
        msg = self._wait_for(lambda m: m.get("id") == i)
        if "error" in msg:
            raise RuntimeError(f"{method}: {msg['error'].get('message')}")
        return msg.get("result", {})

    def open(self, path_or_url: str, settle: float = 0.5) -> Page:
        """Load a page, wait for its load event and `settle` seconds more, collect its errors."""
        url = path_or_url if "://" in path_or_url else "file://" + os.path.abspath(path_or_url)
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(browser=self, session=session)
        for domain in ("Runtime.enable", "Log.enable", "Page.enable"):
            self.call(domain, session=session)
        self._pending.clear()
        self.call("Page.navigate", {"url": url}, session)
        self._wait_for(lambda m: m.get("method") == "Page.loadEventFired" and m.get("sessionId") == session)
        try:
            self._wait_for(lambda m: False, timeout=settle)  # late errors (deferred work, timers)
        except TimeoutError:
            pass
        page.errors.extend(_error_text(m) for m in self._pending if m.get("sessionId") == session and _error_text(m))
        self._pending.clear()
        return page


def _error_text(msg: dict) -> str | None:
    """What a protocol event says went wrong, or None when it is not an error."""
    method, params = msg.get("method"), msg.get("params") or {}
    if method == "Runtime.exceptionThrown":
        d = params.get("exceptionDetails", {})
        return f"exception: {d.get('text')} {(d.get('exception') or {}).get('description', '')}".strip()
    if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
        return "console.error: " + " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
    if method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
        return f"log ({params['entry'].get('source')}): {params['entry'].get('text')}"
    return None
