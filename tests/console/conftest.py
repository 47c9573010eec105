"""The browser tier: the console driven in headless Chromium, run by `bash tests/console/run.sh` (`-m browser`).

Debian's `chromium` and `chromium-driver` (run.sh installs them) and Selenium: the browser is never downloaded.
Without them the tier is skipped, so a plain `pytest` elsewhere does not fail for want of a browser; run.sh checks
they are there before it runs the tier, so there it cannot be skipped.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless Chromium under Selenium, 1280x1000, closed after the test."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.skip(f"needs {CHROMIUM} and {CHROMEDRIVER}: run `bash tests/console/run.sh` (it installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    # Selenium Manager is never asked for a driver or a browser: both paths are given, and it is told to stay offline.
    os.environ["SE_OFFLINE"] = "true"
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root, where Chromium's sandbox cannot start
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,1000",
        "--force-device-scale-factor=1",
        "--lang=en-US",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()
