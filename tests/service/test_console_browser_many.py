"""The console over two models in a real browser (headless Chromium, as
``test_console_browser.py``): one person held by both models, one deletion from the console
forgets them in both, and the receipts, the find page and the log name the operator who
signed in and the reason typed; times switch between UTC and local.

``FORGETTING_CONSOLE_SCREENSHOTS=docs/images`` saves a screenshot of each page there.
"""

from __future__ import annotations

import re
import threading
import time

import pytest
from helpers import FAST, classification_data, user_ids
from test_console_browser import (
    CHROMIUM,
    DRIVER,
    By,
    Service,
    _free_port,
    shot,
    text_of,
    wait_for,
    webdriver,
)

from forgetting import QSSClassifier
from forgetting.service import ServiceConfig, create_app
from forgetting.store import DurableModel

# a real browser against a real server: `make test-slow`
pytestmark = pytest.mark.slow

TOKEN = "vXYjuqBkOab0YCDe5MXeLB-5np8ZJ0d2"  # made by secrets.token_urlsafe(24)
REASON = "GDPR art. 17 request #1234"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """(base url, {name: model}, ids, browser): two models, one server, one browser."""
    import uvicorn

    folder = tmp_path_factory.mktemp("console-many")
    X, y = classification_data(n=240)
    ids = user_ids(len(y))
    models = {
        name: DurableModel.create(str(folder / f"{name}.db"), QSSClassifier(**FAST), X, y, ids)
        for name in ("crm", "billing")
    }
    config = ServiceConfig(tokens=(TOKEN,), operators=("alice",))
    app = create_app(models, config)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.02)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1100,900"):
        options.add_argument(flag)
    options.add_argument("--disable-dev-shm-usage")
    browser = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        yield f"http://127.0.0.1:{port}", models, ids, browser
    finally:
        browser.quit()
        server.should_exit = True
        thread.join(timeout=10)
        for model in models.values():
            model.close()


def test_one_console_request_forgets_a_person_in_both_models(site):
    base, models, ids, browser = site
    browser.get(base + "/")
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.ID, "sign-in").click()
    wait_for(browser, "#find")
    assert text_of(browser, "#operator") == "alice"

    person = ids[12]
    browser.get(base + "/console/forget")
    browser.find_element(By.ID, "forget-id").send_keys(person)
    browser.find_element(By.ID, "review").click()
    wait_for(browser, "#confirm")
    browser.find_element(By.ID, "reason").send_keys(REASON)
    assert "every model that holds them" in text_of(browser, "#model")
    assert all(m.lookup(person)["status"] == "present" for m in models.values())
    shot(browser, "many-confirm")
    browser.find_element(By.ID, "confirm").click()
    wait_for(browser, "#committed")
    for name, model in models.items():
        section = browser.find_element(By.ID, f"outcome-{name}")
        assert model.lookup(person)["status"] == "forgotten"
        assert section.find_element(By.CSS_SELECTOR, ".operator").text == "alice"
        assert section.find_element(By.CSS_SELECTOR, ".reason").text == REASON
        assert model.state_digest() in section.text
        stored = model.lookup(person)["receipts"][-1]
        assert (stored["operator"], stored["reason"]) == ("alice", REASON)
    shot(browser, "many-receipt")


def test_find_shows_each_model_with_operator_and_reason(site):
    base, models, ids, browser = site
    person = ids[12]
    browser.get(base + "/console/find")
    browser.find_element(By.ID, "id").send_keys(person)
    browser.find_element(By.ID, "find").click()
    wait_for(browser, "#status-crm")
    for name, model in models.items():
        assert text_of(browser, f"#status-{name}") == "forgotten"
        section = browser.find_element(By.ID, f"result-{name}")
        assert section.find_element(By.CSS_SELECTOR, ".operator").text == "alice"
        assert section.find_element(By.CSS_SELECTOR, ".reason").text == REASON
        stamp = model.lookup(person)["receipts"][-1]["timestamp"]
        assert section.find_element(By.CSS_SELECTOR, ".timestamp").text == stamp
    shot(browser, "many-find")
    browser.find_element(By.ID, "times-local").click()
    wait_for(browser, "#times-utc")
    browser.get(base + "/console/find?id=" + person)
    local = text_of(browser, "#result-crm .timestamp")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d", local), local
    browser.find_element(By.ID, "times-utc").click()
    wait_for(browser, "#times-local")


def test_the_log_of_each_model_names_the_operator(site):
    base, _, _, browser = site
    for name in ("crm", "billing"):
        browser.get(base + f"/console/log?model={name}")
        assert text_of(browser, "#model-active") == name
        rows = browser.find_elements(By.CSS_SELECTOR, "#log tbody tr")
        assert len(rows) == 1
        assert rows[0].find_element(By.CSS_SELECTOR, ".operator").text == "alice"
        assert rows[0].find_element(By.CSS_SELECTOR, ".reason").text == REASON
    shot(browser, "many-log")
