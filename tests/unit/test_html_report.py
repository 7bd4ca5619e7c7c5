"""`fleetbench report --html` in a real browser (issue 34): Debian's Chromium (make deps) loads the
page of `make demo`'s results, and of a comparison, from a file; every section and chart is there,
nothing is fetched, and the console has no error. One browser for both pages: a few seconds."""
import re
import shutil

import pytest
from util import REPO

from fleetbench.report import generate, html

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
DEMO_OLD = str(REPO / "results/kvm-2vcpu-paddle2.6.2-demo.jsonl")
DEMO_NEW = str(REPO / "results/kvm-2vcpu-paddle2.6.2-demo-2026-11-22.jsonl")


@pytest.fixture(scope="module")
def browser():
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("chromium and chromium-driver are not installed: run `make deps`")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,2000"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def page(tmp_path, argv) -> tuple:
    out = tmp_path / "page"
    assert generate.cli([*argv, "--html", str(out), "--title", "demo"]) == 0
    text = (out / "index.html").read_text()
    return out / "index.html", text


SENTINEL = "fleetbench-test-sentinel"


def console(browser) -> list[dict]:
    """The console's entries up to now: the browser hands them over asynchronously, so a sentinel
    is logged last and entries are collected until it arrives (they arrive in order)."""
    browser.execute_script(f"console.info('{SENTINEL}')")
    entries = []
    for _ in range(200):  # bounded: each get_log is a round trip to the driver
        entries += browser.get_log("browser")
        if any(SENTINEL in e["message"] for e in entries):
            return [e for e in entries if SENTINEL not in e["message"]]
    raise AssertionError(f"the browser's console never delivered the sentinel; got {entries}")


def load(browser, path) -> dict:
    """What the browser saw: section ids, images (loaded or not), the page's links and sources,
    console errors and warnings."""
    console(browser)  # drop what an earlier page left
    browser.get(path.as_uri())
    seen = browser.execute_script("""
        return {sections: Array.from(document.querySelectorAll('section')).map(s => s.id),
                images: Array.from(document.images).map(i => i.complete && i.naturalWidth > 0),
                sources: Array.from(document.querySelectorAll('[src],[href]'))
                              .map(e => e.getAttribute('src') || e.getAttribute('href')),
                text: document.body.innerText};""")
    seen["errors"] = [e for e in console(browser) if e["level"] in ("SEVERE", "WARNING")]
    return seen


def test_the_demo_page_in_chromium(browser, tmp_path):
    path, text = page(tmp_path, [DEMO_OLD])
    seen = load(browser, path)
    headings = re.findall(r'<h[23] id="([^"]+)"', text)
    assert {"resnet50-tiny", "ctr-tiny", "why-not-better"} <= set(headings)
    assert seen["sections"] == [f"s-{h}" for h in headings]  # every section of the report, whole
    assert seen["images"] and all(seen["images"]) and len(seen["images"]) == text.count("<img ")
    # nothing to fetch at view time: every image inline, every link an anchor of the page
    assert all(src.startswith(("data:image/png;base64,", "#")) for src in seen["sources"])
    assert seen["errors"] == []
    # the run list marks the excluded outlier
    assert "(outlier, excluded)" in seen["text"] and "Why not better" in seen["text"]
    browser.save_screenshot(str(tmp_path / "demo.png"))


def test_the_comparison_page_in_chromium(browser, tmp_path):
    path, text = page(tmp_path, [DEMO_OLD, "--", DEMO_NEW])
    seen = load(browser, path)
    assert {"s-comparison", "s-history", "s-resnet50-tiny", "s-why-not-better", "s-cluster-health"} <= set(seen["sections"])
    assert "resnet50 tiny mgwfbp 2x1 10gbe" in seen["text"] and "Holm" in seen["text"]
    assert all(seen["images"]) and seen["errors"] == []
    assert all(src.startswith(("data:image/png;base64,", "#")) for src in seen["sources"])
    browser.save_screenshot(str(tmp_path / "comparison.png"))
    # the comparison itself, below the fold of the page's first screen: its own picture to look at
    section = browser.find_element("id", "s-comparison")
    assert section.size["height"] > 0 and section.screenshot(str(tmp_path / "comparison-section.png"))


def test_the_check_sees_a_broken_page(browser, tmp_path):
    """The checks above can fail: a page with a missing image and a script error is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text('<html><body><img src="gone.png"><script>console.error("boom")</script></body></html>')
    seen = load(browser, bad)
    assert seen["images"] == [False] and {"console-api", "network"} <= {e["source"] for e in seen["errors"]}


def test_a_missing_chart_fails_the_page_in_one_line(tmp_path):
    with pytest.raises(html.PageError, match=r"gone\.png: chart missing from the page"):
        html.page("t", "![x](gone.png)", str(tmp_path))
