"""A small headless-Chromium driver for the book's PDF, screenshots and browser test.

It speaks the Chrome DevTools Protocol over ``--remote-debugging-pipe`` (JSON messages separated by
NUL bytes on file descriptors 3 and 4), so it needs only the Debian ``chromium`` package and the
standard library: no websocket client, no browser download.

    with Browser() as b:
        page = b.open(Path("_build/html/book/intro.html"))   # waits for load, images, fonts, MathJax
        page.evaluate("document.title")
        page.screenshot(Path("intro.png"))
        page.pdf(Path("intro.pdf"))

By default the browser is offline (every host name resolves to nothing), so a page that renders only
with the network (MathJax from a CDN) shows that here as it would on a reader's laptop offline.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
INSTALL_HINT = "install Debian's chromium (`make browser`, or `apt-get install -y chromium` as root)"

# Resolve when MathJax has typeset the page (or when it is absent / never loads), after the images
# and fonts have loaded. MathJax 3 exposes startup.promise once its script has run.
READY_JS = """
(async () => {
  const until = (cond, ms) => new Promise(res => {
    const t0 = Date.now();
    const tick = () => (cond() || Date.now() - t0 > ms) ? res(cond()) : setTimeout(tick, 50);
    tick();
  });
  await Promise.all([...document.images].map(img => img.complete ? 0 :
      new Promise(r => { img.addEventListener('load', r); img.addEventListener('error', r); })));
  if (document.fonts) { await document.fonts.ready; }
  const needsMath = !!document.querySelector('.math, script[src*="mathjax" i], script[src*="tex-" i]');
  let mathjax = 'absent';
  if (needsMath) {
    // a boolean: resolving with startup.promise itself would adopt it, so `loaded` would be its value
    // (undefined) and a typeset page would be reported "not loaded"
    const loaded = await until(() => !!(window.MathJax && window.MathJax.startup &&
                                        window.MathJax.startup.promise), %(math_ms)d);
    if (loaded) { await window.MathJax.startup.promise; mathjax = 'typeset'; } else { mathjax = 'not loaded'; }
  }
  return mathjax;
})()
"""


class BrowserError(RuntimeError):
    """Chromium could not be started or a DevTools command failed; the message says which."""


def find_chromium() -> str | None:
    """The Chromium executable (``$CHROMIUM`` first), or None."""
    env = os.environ.get("CHROMIUM")
    if env:
        return env if shutil.which(env) else None
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


def _above_ten(fd: int) -> int:
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


class Page:
    """One tab, attached with a flat DevTools session."""

    def __init__(self, browser: Browser, session: str, target: str):
        self.browser, self.session, self.target = browser, session, target

    def send(self, method: str, params: dict | None = None, timeout: float = 60.0) -> dict:
        return self.browser.send(method, params, session=self.session, timeout=timeout)

    def open(self, url: str | Path, timeout: float = 60.0, math_timeout_s: float = 10.0) -> str:
        """Navigate and wait for the load event, images, fonts and MathJax; return MathJax's state
        ('typeset', 'not loaded' or 'absent')."""
        if isinstance(url, Path):
            url = url.resolve().as_uri()
        self.browser.events.clear()
        reply = self.send("Page.navigate", {"url": url}, timeout=timeout)
        if reply.get("errorText"):
            raise BrowserError(f"could not open {url}: {reply['errorText']}")
        self.browser.wait_event("Page.loadEventFired", self.session, timeout)
        return self.evaluate(READY_JS % {"math_ms": int(math_timeout_s * 1000)}, timeout=timeout)

    def evaluate(self, expression: str, timeout: float = 60.0) -> Any:
        """The JSON value of ``expression`` (promises awaited); raise BrowserError on a JS exception."""
        reply = self.send(
            "Runtime.evaluate", {"expression": expression, "awaitPromise": True, "returnByValue": True},
            timeout=timeout,
        )
        if "exceptionDetails" in reply:
            d = reply["exceptionDetails"]
            raise BrowserError(f"JavaScript error: {d.get('exception', {}).get('description') or d.get('text')}")
        return reply["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        """A full-page PNG at the current viewport width."""
        metrics = self.send("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        height = int(min(size["height"], 30000))
        # lay the page out at its full height, so sticky sidebars are drawn whole, then restore
        self._metrics(self.browser.width, height)
        clip = {"x": 0, "y": 0, "width": self.browser.width, "height": height, "scale": 1}
        try:
            reply = self.send("Page.captureScreenshot", {"format": "png", "clip": clip, "captureBeyondViewport": True})
        finally:
            self._metrics(self.browser.width, self.browser.height)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(reply["data"]))
        return path

    def _metrics(self, width: int, height: int) -> None:
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})

    def pdf(self, path: Path, *, paper: tuple[float, float] = (8.27, 11.69), margin_in: float = 0.5) -> Path:
        """Print the page (print media, backgrounds kept) to an A4 PDF."""
        reply = self.send(
            "Page.printToPDF",
            {
                "paperWidth": paper[0], "paperHeight": paper[1], "printBackground": True,
                "marginTop": margin_in, "marginBottom": margin_in, "marginLeft": margin_in,
                "marginRight": margin_in, "displayHeaderFooter": False, "preferCSSPageSize": False,
            },
            timeout=120,
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(reply["data"]))
        return path


class Browser:
    """A headless Chromium process driven over a DevTools pipe (a context manager)."""

    def __init__(self, *, width: int = 1300, height: int = 900, offline: bool = True, executable: str | None = None):
        exe = executable or find_chromium()
        if not exe:
            raise BrowserError(f"no Chromium found ({', '.join(CANDIDATES)}); {INSTALL_HINT}")
        self.width, self.height = width, height
        self._profile = tempfile.mkdtemp(prefix="layerlab-chromium-")
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        # the child's ends above 10, so that the shell's 3<& / 4>& redirections cannot clobber them
        to_chrome_r, from_chrome_w = _above_ten(to_chrome_r), _above_ten(from_chrome_w)
        args = [
            exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
            "--no-default-browser-check", "--disable-extensions", "--hide-scrollbars", "--mute-audio",
            "--allow-file-access-from-files", "--remote-debugging-pipe", f"--user-data-dir={self._profile}",
            f"--window-size={width},{height}",
        ]
        if offline:
            args.append("--host-resolver-rules=MAP * ~NOTFOUND")
        # bash (dash takes no descriptor above 9) puts our pipe ends on Chromium's fds 3 (in) and 4 (out)
        cmd = ["bash", "-c", f'exec "$@" 3<&{to_chrome_r} 4>&{from_chrome_w}', "bash", *args, "about:blank"]
        self._log = open(Path(self._profile) / "chromium.log", "wb")  # never a pipe: it would fill up
        self.proc = subprocess.Popen(
            cmd, pass_fds=(to_chrome_r, from_chrome_w), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=self._log,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict] = []
        try:
            self.send("Browser.getVersion", timeout=30)
        except BrowserError:
            self.close()
            raise

    # -- protocol
    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("timed out waiting for Chromium")
            ready, _, _ = select.select([self._from_chrome], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                err = (Path(self._profile) / "chromium.log").read_text(errors="replace")[-2000:]
                raise BrowserError(f"Chromium exited (code {self.proc.poll()}): {err.strip()}")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict | None = None, *, session: str | None = None,
             timeout: float = 60.0) -> dict:
        """Send one DevTools command and return its result (events seen meanwhile are kept)."""
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def wait_event(self, name: str, session: str | None, timeout: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for i, ev in enumerate(self.events):
                if ev["method"] == name and ev.get("sessionId") == session:
                    return self.events.pop(i)
            ev = self._read_message(deadline)
            if "method" in ev:
                self.events.append(ev)

    # -- pages
    def new_page(self) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session, target)
        page.send("Page.enable")
        page.send("Runtime.enable")
        page._metrics(self.width, self.height)
        return page

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                try:
                    os.write(self._to_chrome, json.dumps({"id": 0, "method": "Browser.close"}).encode() + b"\0")
                    self.proc.wait(timeout=10)
                except (OSError, subprocess.TimeoutExpired):
                    self.proc.kill()
                    self.proc.wait()
        finally:
            for fd in (self._to_chrome, self._from_chrome):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._log.close()
            shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def book_pages(html_dir: Path, toc_path: Path) -> list[Path]:
    """The built HTML pages of the toc's entries, in the toc's order (entries not built are left out)."""
    import yaml

    toc = yaml.safe_load(toc_path.read_text())
    files: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key in ("root", "file"):
                if key in node:
                    files.append(str(node[key]))
            for key in ("parts", "chapters", "sections"):
                walk(node.get(key))
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(toc)
    pages = [html_dir / f"{Path(f).with_suffix('')}.html" for f in files]
    return [p for p in pages if p.exists()]
