"""The search page in a real headless Chromium (Debian's /usr/bin/chromium, driven by Playwright)."""

import os
from pathlib import Path

import httpx
import pytest

CHROMIUM = os.environ.get("SENTCL_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).is_file():
        pytest.fail(
            f"{CHROMIUM} is missing: `make setup` installs Debian's chromium (or set SENTCL_CHROMIUM)"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        yield browser
        browser.close()


def test_typing_a_query_shows_the_nearest_sentences(served, browser, tmp_path):
    page = browser.new_page(viewport={"width": 900, "height": 700})
    page.goto(f"{served.url}/")
    page.wait_for_function("document.getElementById('about').textContent.includes('sentences indexed')")
    assert "12 sentences indexed" in page.text_content("#about")
    query = "a dog runs in the park"
    page.fill("#query", query)
    page.select_option("#top_k", "5")
    page.click("#go")
    page.wait_for_selector("#results li.hit")
    texts = page.locator("#results li.hit .text").all_text_contents()
    scores = [float(s) for s in page.locator("#results li.hit .score").all_text_contents()]
    expected = httpx.post(f"{served.url}/search", json={"query": query, "top_k": 5}).json()["results"][0]
    assert texts == [h["text"] for h in expected]
    assert scores == [round(h["score"], 3) for h in expected]
    assert "5 results" in page.text_content("#status")
    page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
    assert (tmp_path / "page.png").stat().st_size > 5_000
    page.close()


def test_an_error_is_shown_not_swallowed(served, browser):
    page = browser.new_page()
    page.goto(f"{served.url}/")
    page.wait_for_function("document.getElementById('about').textContent.includes('indexed')")
    page.fill("#query", "x" * 201)  # over the server's --max-chars 200
    page.click("#go")
    page.wait_for_selector("#status.error")
    assert "at most 200" in page.text_content("#status")
    assert page.locator("#results li").count() == 0
    page.close()
