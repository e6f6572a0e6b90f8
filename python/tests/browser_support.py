"""A report page loaded in headless Chromium (Debian's `chromium`), checked
through the DevTools protocol over a pipe (`--remote-debugging-pipe`: file
descriptors 3 and 4 of the browser, messages separated by NUL bytes), so no
websocket client is needed.

`check_page(path)` loads a file and returns what a reader would see go wrong:
images that do not decode (or decode to nothing), in-page links (`#anchor`)
with no element of that id, and console errors (a failed load, a script
error, `console.error`).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# Run in the page once it has loaded: every image decoded (or failed), its
# natural size; every in-page link and whether its target exists.
PAGE_SCRIPT = """
(async () => {
  const imgs = [...document.images];
  await Promise.all(imgs.map(i => i.decode().catch(() => null)));
  const links = [...document.querySelectorAll('a[href^="#"]')];
  return {
    images: imgs.map(i => ({src: i.getAttribute('src'), width: i.naturalWidth, height: i.naturalHeight})),
    links: links.map(a => {
      const id = decodeURIComponent(a.getAttribute('href').slice(1));
      return {href: a.getAttribute('href'), found: id !== '' && document.getElementById(id) !== null};
    }),
  };
})()
"""


@dataclass
class PageCheck:
    images: list[dict[str, Any]]
    links: list[dict[str, Any]]
    console_errors: list[str] = field(default_factory=list)

    @property
    def broken_images(self) -> list[str]:
        return [i["src"] for i in self.images if not (i["width"] > 0 and i["height"] > 0)]

    @property
    def dangling_links(self) -> list[str]:
        return [a["href"] for a in self.links if not a["found"]]

    def problems(self) -> list[str]:
        return ([f"image does not decode: {s}" for s in self.broken_images]
                + [f"link to no element: {h}" for h in self.dangling_links]
                + [f"console: {e}" for e in self.console_errors])


def chromium() -> str:
    """The browser, or skip naming the package the set-up installs."""
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("not installed: chromium (scripts/apt-packages.txt installs it)")


class _Pipe:
    def __init__(self, to_browser: int, from_browser: int):
        self.w, self.r = to_browser, from_browser
        self.buf = b""
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 20) -> dict[str, Any]:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        reply = self._until(lambda m: m.get("id") == self.next_id, timeout)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_event(self, method: str, timeout: float = 20) -> dict[str, Any]:
        for i, m in enumerate(self.events):
            if m.get("method") == method:
                return self.events.pop(i)
        return self._until(lambda m: m.get("method") == method, timeout, keep=False)

    def _until(self, match, timeout: float, keep: bool = True) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self.buf:
                raw, self.buf = self.buf.split(b"\0", 1)
                m = json.loads(raw)
                if match(m):
                    return m
                if "method" in m:
                    self.events.append(m)
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.r], [], [], left)[0]:
                raise TimeoutError("the browser did not answer")
            chunk = os.read(self.r, 1 << 16)
            if not chunk:
                raise RuntimeError("the browser closed its pipe")
            self.buf += chunk


def check_page(path: Path, tmp: Path) -> PageCheck:
    """Load ``path`` in headless Chromium and report what goes wrong."""
    exe = chromium()
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()

    def child_fds() -> None:  # the browser reads commands on fd 3 and writes on fd 4
        # Copies first: either end may itself be fd 3 or 4, and dup2 onto the same fd keeps close-on-exec.
        a, b = os.dup(to_r), os.dup(from_w)
        os.dup2(a, 3)
        os.dup2(b, 4)

    proc = subprocess.Popen(
        [exe, "--headless=new", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--no-default-browser-check", "--disable-extensions", f"--user-data-dir={tmp / 'chromium-profile'}",
         "about:blank"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=child_fds, close_fds=False)
    os.close(to_r)
    os.close(from_w)
    pipe = _Pipe(to_w, from_r)
    try:
        target = pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            pipe.send(f"{domain}.enable", session=session)
        pipe.send("Page.navigate", {"url": path.resolve().as_uri()}, session=session)
        pipe.wait_event("Page.loadEventFired")
        got = pipe.send("Runtime.evaluate", {"expression": PAGE_SCRIPT, "awaitPromise": True,
                                             "returnByValue": True}, session=session)
        if "exceptionDetails" in got:
            raise RuntimeError(f"the page script failed: {got['exceptionDetails']}")
        value = got["result"]["value"]
        errors = []
        for m in pipe.events:
            p = m.get("params", {})
            if m["method"] == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
                errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p["args"]))
            elif m["method"] == "Runtime.exceptionThrown":
                errors.append(p["exceptionDetails"].get("exception", {}).get("description", "exception"))
            elif m["method"] == "Log.entryAdded" and p["entry"]["level"] == "error":
                errors.append(f"{p['entry']['text']} ({p['entry'].get('url', '')})")
        try:
            pipe.send("Browser.close", timeout=5)
        except (RuntimeError, TimeoutError):
            pass
        return PageCheck(value["images"], value["links"], errors)
    finally:
        os.close(to_w)
        os.close(from_r)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
