"""A real browser opens the built site: every page loads with its images, shows no error,
its sidebar links resolve, and its launch buttons open the chapter's own Colab edition.

Debian's chromium, headless, driven by Playwright (no browser download: the system one is
used). Screenshots, light and dark, go to _build/screenshots for the record. Without a
build or a browser these tests skip with instructions, except under CI (CI=true), where
either is a failure.
"""

import functools
import http.server
import os
import shutil
import threading
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
SCREENSHOTS = ROOT / "_build" / "screenshots"
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"]
INSTALL_HINT = "install Debian's chromium (sudo apt-get install chromium) or set DEEPDIVE_CHROMIUM"


def toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [toc["root"]] + [c["file"] for part in toc["parts"] for c in part["chapters"]]


def chromium_path() -> str | None:
    candidates = (os.environ.get("DEEPDIVE_CHROMIUM"), shutil.which("chromium"),
                  shutil.which("chromium-browser"), shutil.which("google-chrome"))
    return next((c for c in candidates if c), None)


def unavailable(message: str):
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the test output is the report, not the access log
        pass


@pytest.fixture(scope="module")
def site():
    """(base URL of the built site served over HTTP, a Playwright browser)."""
    if not (HTML / "index.html").exists():
        unavailable(f"no built site at {HTML}: run `make book` first")
    executable = chromium_path()
    if executable is None:
        unavailable(f"no chromium found: {INSTALL_HINT}")
    from playwright.sync_api import sync_playwright

    handler = functools.partial(_QuietHandler, directory=str(HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        yield f"http://127.0.0.1:{server.server_port}/", browser
        browser.close()
    server.shutdown()


@pytest.fixture
def page(site):
    base, browser = site
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    yield base, page
    page.close()


# Text outside the cells that are meant to fail; those must show their error.
_VISIBLE_TEXT_OUTSIDE_EXPECTED_ERRORS = """() => {
  const copy = document.querySelector('main').cloneNode(true);
  copy.querySelectorAll('.tag_raises-exception').forEach(e => e.remove());
  return copy.innerText;
}"""


@pytest.mark.parametrize("doc", toc_files())
def test_page_loads_with_every_image_and_no_error(page, doc):
    base, tab = page
    response = tab.goto(base + doc + ".html", wait_until="load")
    assert response is not None and response.ok, f"{doc}: HTTP {response and response.status}"

    broken = tab.evaluate("Array.from(document.images).filter(i => !(i.complete && "
                          "i.naturalWidth > 0)).map(i => i.getAttribute('src'))")
    assert broken == [], doc
    text = tab.evaluate(_VISIBLE_TEXT_OUTSIDE_EXPECTED_ERRORS)
    for marker in ("Traceback (most recent call last)", "DeadKernelError"):
        assert marker not in text, f"{doc} shows {marker!r}"
    name = doc.replace("/", "_")
    tab.screenshot(path=SCREENSHOTS / f"{name}.png", full_page=True)
    tab.evaluate("document.documentElement.dataset.theme = 'dark'")
    tab.screenshot(path=SCREENSHOTS / f"{name}_dark.png", full_page=True)


def test_every_sidebar_link_resolves(page):
    base, tab = page
    tab.goto(base + toc_files()[0] + ".html", wait_until="load")
    links = tab.evaluate("Array.from(document.querySelectorAll('.bd-sidebar-primary "
                         "a.reference.internal')).map(a => a.href)")
    assert len(links) >= len(toc_files()) - 1  # the root page may be the navbar's home link
    for link in links:
        response = tab.request.get(link)
        assert response.ok, f"sidebar link {link} answers HTTP {response.status}"


@pytest.mark.parametrize("doc", [d for d in toc_files() if d.startswith("notebooks/")])
def test_launch_buttons_open_this_chapters_notebook(page, doc):
    base, tab = page
    tab.goto(base + doc + ".html", wait_until="load")
    launch = tab.evaluate("Array.from(document.querySelectorAll('a')).map(a => a.href)"
                          ".filter(h => h.includes('colab.research.google.com') || "
                          "h.includes('mybinder.org'))")
    assert {"colab", "binder"} <= {"colab" if "colab" in h else "binder" for h in launch}
    # The chapter's Colab edition, on the branch the Pages workflow publishes them to.
    assert all(h.endswith(f"{doc}.ipynb") and "/editions" in h for h in launch), launch
