"""The web console in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``) driven by Selenium against ``forgetting``'s app under uvicorn, one
server and one browser for the module. Signs in, finds a forgotten id, submits a deletion,
exports the log and watches a rebuild land.

``FORGETTING_CONSOLE_SCREENSHOTS=docs/images`` saves a screenshot of each page there (the
ones in docs/operators.md).
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest
from helpers import FAST, classification_data, schema_ids, user_ids

from forgetting import QSSClassifier
from forgetting.service import ServiceConfig, create_app
from forgetting.store import DurableModel

# a real browser against a real server: `make test-slow`
pytestmark = pytest.mark.slow

TOKEN = "vXYjuqBkOab0YCDe5MXeLB-5np8ZJ0d2"  # made by secrets.token_urlsafe(24)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # pragma: no cover - the test extra installs it
    webdriver = None

MISSING = (
    "browser tests need selenium and Chromium with its driver "
    "(apt-get install chromium chromium-driver)"
    if webdriver is None or CHROMIUM is None or DRIVER is None
    else None
)
if MISSING and os.environ.get("FORGETTING_REQUIRE_BROWSER") == "1":  # CI installs them
    raise RuntimeError(f"FORGETTING_REQUIRE_BROWSER=1 but {MISSING}")
if MISSING:
    pytest.skip(MISSING, allow_module_level=True)

SHOTS = os.environ.get("FORGETTING_CONSOLE_SCREENSHOTS")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """(base url, model, ids, download folder, browser): one server, one browser."""
    import uvicorn

    folder = tmp_path_factory.mktemp("console")
    X, y = classification_data(n=400)
    ids = user_ids(len(y))
    params = {**FAST, "rebuild": "background"}
    model = DurableModel.create(str(folder / "m.db"), QSSClassifier(**params), X, y, ids)
    model.wait_for_rebuilds()
    app = create_app(model, ServiceConfig(tokens=(TOKEN,)))
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.02)

    downloads = folder / "downloads"
    downloads.mkdir()
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1100,760"):
        options.add_argument(flag)
    options.add_argument("--disable-dev-shm-usage")
    options.add_experimental_option(
        "prefs",
        {"download.default_directory": str(downloads), "download.prompt_for_download": False},
    )
    browser = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        yield f"http://127.0.0.1:{port}", model, ids, downloads, browser
    finally:
        browser.quit()
        server.should_exit = True
        thread.join(timeout=10)
        model.close()


def shot(browser, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(Path(SHOTS) / f"console-{name}.png"))


def text_of(browser, css: str) -> str:
    return browser.find_element(By.CSS_SELECTOR, css).text


def wait_for(browser, css: str, timeout: float = 10):
    return WebDriverWait(browser, timeout).until(lambda b: b.find_element(By.CSS_SELECTOR, css))


def test_sign_in(site):
    base, _, _, _, browser = site
    browser.get(base + "/")
    assert "Sign in" in browser.page_source
    shot(browser, "sign-in")
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.ID, "sign-in").click()
    wait_for(browser, "#find")
    assert browser.current_url.endswith("/console/find")
    cookie = browser.get_cookie("forgetting_console")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"


def test_find_a_forgotten_id(site):
    base, model, _, _, browser = site
    victim = schema_ids(model.estimator, 1)[0]
    receipt = model.forget([victim])
    model.wait_for_rebuilds()
    browser.get(base + "/console/find")
    browser.find_element(By.ID, "id").send_keys(victim)
    browser.find_element(By.ID, "find").click()
    wait_for(browser, "#status")
    assert text_of(browser, "#status") == "forgotten"
    assert text_of(browser, ".timestamp") == receipt["timestamp"]
    assert receipt["state_digest"] in browser.page_source
    shot(browser, "find")


def test_submit_a_deletion(site):
    base, model, ids, _, browser = site
    target = ids[7]
    browser.get(base + "/console/forget")
    browser.find_element(By.ID, "forget-id").send_keys(target)
    browser.find_element(By.ID, "review").click()
    wait_for(browser, "#confirm")
    assert model.lookup(target)["status"] == "present"  # nothing yet
    shot(browser, "confirm")
    browser.find_element(By.ID, "confirm").click()
    wait_for(browser, "#committed")
    assert model.lookup(target)["status"] == "forgotten"
    assert model.lookup(target)["receipts"][-1]["state_digest"] in browser.page_source
    model.wait_for_rebuilds()
    shot(browser, "receipt")


def test_export_the_log(site):
    base, model, _, downloads, browser = site
    browser.get(base + "/console/log")
    rows = browser.find_elements(By.CSS_SELECTOR, "#log tbody tr")
    assert len(rows) == 2  # the two deletions above
    shot(browser, "log")
    browser.find_element(By.ID, "export-csv").click()
    target = downloads / "receipts.csv"
    deadline = time.monotonic() + 10
    while not target.exists():
        assert time.monotonic() < deadline, list(downloads.iterdir())
        time.sleep(0.05)
    lines = target.read_text().strip().splitlines()
    assert lines[0].startswith("seq,timestamp") and len(lines) == 3


def test_watch_a_rebuild_land(site):
    base, model, _, _, browser = site
    engine = model.estimator.engine_
    gate, original = threading.Event(), engine._build

    def held(r, data, *gram):  # hold every rebuild until the page has shown it
        gate.wait(timeout=30)
        return original(r, data, *gram)

    engine._build = held
    try:
        others = set(schema_ids(model.estimator, 1)) | set(schema_ids(model.estimator, 2))
        victim = next(i for i in schema_ids(model.estimator, 0) if i not in others)
        model.forget([victim])
        browser.get(base + "/console/health")
        progress = text_of(browser, "#progress")
        assert progress.startswith("2 of 3 instances valid") and "rebuilding: 0" in progress
        shot(browser, "health")
    finally:
        gate.set()
        model.wait_for_rebuilds()
        engine._build = original
    browser.refresh()
    assert text_of(browser, "#progress").startswith("3 of 3 instances valid")
    browser.find_element(By.ID, "verify").click()
    deadline = time.monotonic() + 30
    while "OK: the refit matches" not in browser.page_source:
        assert time.monotonic() < deadline
        time.sleep(0.1)
        browser.refresh()
