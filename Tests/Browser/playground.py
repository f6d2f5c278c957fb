#!/usr/bin/env python3
"""Drives the playground in Debian's Chromium (headless, through Playwright) against a running
Router, and checks what each page decoded through its `window.tonearm` hook.

  playground.py ROUTER_URL SCENARIO [--screenshots DIR]

Scenarios: isolation (T1, T2), stop (T3), replace (T4), controls, queue, errors, restart, guilds,
search, fallback, stall.
Exits 0 when every check passed, else prints the failures and exits 1. The `restart` and `stall`
scenarios print `PLAYING` and wait for a line on stdin (sent after the test restarted the engine,
or froze the Router for a moment).
"""
import argparse, os, sys, time
from playwright.sync_api import sync_playwright

CHROMIUM = os.environ.get("TONEARM_CHROMIUM", "/usr/lib/chromium/chromium")
failures = []


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what, flush=True)
    if not condition:
        failures.append(what)
    return condition


def wait(predicate, timeout=10.0, step=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


class User:
    """One browser context (its own storage, so its own identity and session) and its pages."""

    def __init__(self, browser, url, viewport=None):
        self.url = url
        self.context = browser.new_context(viewport=viewport or {"width": 1280, "height": 800})
        self.page = self.open_tab()

    def open_tab(self):
        page = self.context.new_page()
        page.on("pageerror", lambda error: print("page error:", error, flush=True))
        page.goto(self.url)
        page.wait_for_function("window.tonearm && window.tonearm.connection === 'connected'", timeout=10000)
        return page


def frequency(page):
    return page.evaluate("tonearm.dominantFrequency()")


def decoded(page):
    return page.evaluate("tonearm.stats.decoded")


def hears(page, hz, timeout=8.0):
    return wait(lambda: abs(frequency(page) - hz) <= 5, timeout, 0.25)


def play(page, url, button="#play-now"):
    page.fill("#url", url)
    page.click(button)


def status(page):
    return page.evaluate("tonearm.state && tonearm.state.status")


def set_range(page, selector, value):
    page.eval_on_selector(selector, "(e, v) => { e.value = v; e.dispatchEvent(new Event('input')); e.dispatchEvent(new Event('change')); }", value)


def isolation(browser, url, _):
    a, b = User(browser, url), User(browser, url)
    check(a.page.evaluate("tonearm.contextState()") == "running", "the AudioContext runs")
    sessions = [u.page.text_content("#session") for u in (a, b)]
    check(sessions[0] != sessions[1], f"two users, two sessions {sessions}")
    play(a.page, "tone-440.mp3")
    play(b.page, "tone-880.mp3")
    check(hears(a.page, 440), "T1: user A hears 440 Hz")
    check(hears(b.page, 880), "T1: user B hears 880 Hz at the same time")
    heard = []
    for _ in range(10):
        heard.append((frequency(a.page), frequency(b.page)))
        time.sleep(0.5)
    check(all(abs(x - 440) <= 5 and abs(y - 880) <= 5 for x, y in heard), f"T2: each page only its own tone for 5 s {heard}")


def stop(browser, url, _):
    a, b = User(browser, url), User(browser, url)
    play(a.page, "tone-440.mp3")
    play(b.page, "tone-880.mp3")
    check(hears(a.page, 440) and hears(b.page, 880), "both play")
    b.page.evaluate("tonearm.resetGaps()")
    a.page.click("#stop")
    check(wait(lambda: status(a.page) == "idle", 3), "A is stopped")
    time.sleep(0.3)
    before = decoded(a.page)
    time.sleep(2)
    check(decoded(a.page) == before, "T3: A decodes nothing after stop")
    gap = b.page.evaluate("tonearm.stats.maxGapMs")
    check(gap < 200 and abs(frequency(b.page) - 880) <= 5, f"T3: B kept playing without a gap (longest {gap:.0f} ms)")


def replace(browser, url, _):
    a = User(browser, url)
    play(a.page, "tone-440.mp3")
    check(hears(a.page, 440), "A hears 440 Hz")
    play(a.page, "tone-660.mp3")
    check(hears(a.page, 660), "T4: play now replaces it with 660 Hz")
    time.sleep(1)
    check(abs(frequency(a.page) - 660) <= 5, "T4: only the new tone afterwards")
    titles = a.page.locator("#queue li").all_text_contents()
    check(len(titles) == 2 and "tone-660" in a.page.text_content("#queue li.current"), f"the queue marks the new track {titles}")


def controls(browser, url, _):
    a = User(browser, url)
    play(a.page, "tone-440.mp3")
    check(hears(a.page, 440), "plays")
    a.page.keyboard.press("Escape")
    a.page.locator("body").click(position={"x": 5, "y": 5})
    a.page.keyboard.press("Space")
    check(wait(lambda: status(a.page) == "paused", 3), "space pauses")
    time.sleep(0.3)
    before = decoded(a.page)
    time.sleep(1)
    check(decoded(a.page) == before, "nothing is decoded while paused")
    a.page.click("#toggle")
    check(wait(lambda: decoded(a.page) > before + 25, 3), "resume brings the audio back")
    loud = wait(lambda: a.page.evaluate("tonearm.rms(0.5)"), 2)
    set_range(a.page, "#volume", 25)
    quiet = wait(lambda: (lambda r: r if r < loud * 0.4 else 0)(a.page.evaluate("tonearm.rms(0.5)")), 4)
    check(quiet and quiet < loud * 0.4, f"volume 25 % is quieter: rms {loud:.3f} → {quiet or 0:.3f}")
    a.page.click("#mute")
    check(wait(lambda: a.page.evaluate("tonearm.rms(0.5)") < 0.001, 4), "mute silences it")
    a.page.click("#mute")
    check(wait(lambda: a.page.evaluate("tonearm.state.volume") == 25, 3), "unmute restores the volume")
    # Seek in a file whose tone steps every second (400 + 40·k Hz in second k).
    play(a.page, "steps.mp3")
    check(hears(a.page, 400, 6), "steps.mp3 starts at 400 Hz")
    set_range(a.page, "#seek", 6000)
    check(hears(a.page, 640, 4), "seek to 6 s plays the 640 Hz step")
    check(wait(lambda: 6000 <= a.page.evaluate("Number(document.getElementById('seek').value)") < 9000, 2), "the seek bar follows")


def queue(browser, url, _):
    a = User(browser, url)
    play(a.page, "short-550.mp3", "#enqueue")
    wait(lambda: a.page.locator("#queue li").count() == 1, 5)
    play(a.page, "short-770.mp3", "#enqueue")
    check(wait(lambda: a.page.locator("#queue li").count() == 2, 5), "two tracks queued")
    check(hears(a.page, 550), "the first plays")
    check(hears(a.page, 770, 6), "the queue moves on to the second by itself")
    # A second tab of the same user joins mid-stream.
    play(a.page, "tone-440.mp3")
    check(hears(a.page, 440), "tab 1 plays 440 Hz")
    started = time.monotonic()
    second = a.open_tab()
    first_audio = wait(lambda: decoded(second) > 0 and time.monotonic(), 3, 0.02)
    check(first_audio and first_audio - started < 1.0, f"tab 2 hears audio {((first_audio or 99) - started):.2f} s after opening")
    check(hears(second, 440, 3), "tab 2 hears the same session")
    check(second.text_content("#session") == a.page.text_content("#session"), "both tabs show one session")


def errors(browser, url, shots):
    a = User(browser, url)
    play(a.page, "missing.mp3")
    check(wait(lambda: "not in the media folder" in a.page.text_content("#message"), 5), "an unplayable file is explained")
    play(a.page, "ftp://example.com/a.mp3")
    check(wait(lambda: "http" in a.page.text_content("#message"), 5), "an unsupported link is explained")
    a.page.fill("#url", "")
    a.page.click("#play-now")
    check("Type" in a.page.text_content("#message"), "an empty box is explained")
    for name in ["tone-440.mp3", "tone-660.mp3", "tone-880.mp3"]:
        play(a.page, name, "#enqueue")
    hears(a.page, 440)
    for width, height, label in [(1280, 800, "desktop"), (390, 844, "phone")]:
        a.page.set_viewport_size({"width": width, "height": height})
        time.sleep(0.3)
        if shots:
            a.page.screenshot(path=os.path.join(shots, f"playground-{label}.png"), full_page=True)
        for selector in ["#toggle", "#url", "#play-now", "#seek", "#volume", "#queue li.current", "#loop"]:
            box = a.page.locator(selector).bounding_box()
            check(a.page.is_visible(selector) and box and box["x"] >= 0 and box["x"] + box["width"] <= width + 1,
                  f"{label}: {selector} is visible and fits")


def restart(browser, url, _):
    a = User(browser, url)
    play(a.page, "tone-440.mp3")
    check(hears(a.page, 440), "plays before the engine restart")
    print("PLAYING", flush=True)
    sys.stdin.readline()
    check(wait(lambda: "restarted" in a.page.text_content("#message"), 10), "the page says the engine restarted")
    check(wait(lambda: status(a.page) == "idle", 5), "the session is stopped, not silently 'playing'")
    a.page.click("#toggle")
    check(hears(a.page, 440, 10), "play continues after the restart")


def stall(browser, url, _):
    a = User(browser, url)
    play(a.page, "tone-440.mp3")
    check(hears(a.page, 440), "plays before the stall")
    before = a.page.evaluate("tonearm.stats")
    print("PLAYING", flush=True)
    sys.stdin.readline()  # the Router was frozen for 1.5 s meanwhile
    check(wait(lambda: a.page.evaluate("tonearm.stats.decoded") > before["decoded"] + 100, 5), "audio flows again after the stall")
    time.sleep(1)
    after = a.page.evaluate("tonearm.stats")
    check(after["underruns"] > before["underruns"], f"the stall was an underrun ({before['underruns']} → {after['underruns']})")
    check(after["lead"] <= after["depth"] + 0.12, f"no delay piled up: {after['lead'] * 1000:.0f} ms buffered (depth {after['depth'] * 1000:.0f} ms)")
    check(abs(frequency(a.page) - 440) <= 5, "the same tone continues")


def guilds(browser, url, _):
    import json, urllib.request

    def rest(method, path, body=None, token=None):
        request = urllib.request.Request(url.rstrip("/") + path, method=method,
                                         data=json.dumps(body).encode() if body is not None else None,
                                         headers={"Authorization": f"Bearer {token or BOT_TOKEN}",
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as error:
            return error.code, json.load(error)

    check(rest("POST", "/api/sessions/81384788765712384/play", {"url": "tone-440.mp3"})[0] == 202, "a bot plays in a guild")
    check(rest("POST", "/api/sessions/41771983423143937/queue", {"url": "tone-880.mp3"})[0] == 200, "and in another")
    page = browser.new_context().new_page()
    page.goto(url.rstrip("/") + "/guilds")
    page.fill("#token", "not-the-token")
    page.click("#sign-in button")
    check(wait(lambda: "not the bot token" in page.text_content("#message"), 5), "a wrong token is refused in words")
    page.fill("#token", BOT_TOKEN)
    page.click("#sign-in button")
    rows = "#guilds tbody tr"
    check(wait(lambda: page.locator(rows).count() == 2, 5), "both live guilds are listed")
    first = page.locator('tr[data-guild="81384788765712384"]')
    check(wait(lambda: "tone-440.mp3" in first.text_content() and "playing" in first.text_content(), 5), "with what they play")
    first.locator('button[data-op="pause"]').click()
    check(wait(lambda: rest("GET", "/api/sessions/81384788765712384")[1].get("status") == "paused", 5), "pause from the page pauses the guild")
    check(wait(lambda: first.locator('button[data-op="resume"]').count() == 1, 3), "the row offers resume")


def search(browser, url, _):
    a = User(browser, url)
    a.page.fill("#url", "lofi beats")
    check(wait(lambda: a.page.locator("#results li").count() == 8, 5), "typing words shows search results")
    first = a.page.locator("#results li").first.text_content()
    check("lofi beats 1" in first and "1:01" in first, f"a result has its title and duration: {first!r}")
    a.page.fill("#url", "tone-440.mp3")
    check(wait(lambda: a.page.locator("#results li").count() == 0, 3), "a file name does not search")


def fallback(browser, url, _):
    # A host name other than localhost is not a secure context: no WebCodecs there.
    insecure = url.replace("127.0.0.1", "tonearm.test")
    page = browser.new_context().new_page()
    page.goto(insecure)
    page.wait_for_function("window.tonearm && window.tonearm.connection === 'connected'", timeout=10000)
    check(page.evaluate("typeof AudioDecoder") == "undefined", "the test page really lacks WebCodecs")
    check(page.is_visible("#fallback") and "WebCodecs" in page.text_content("#fallback"), "the page says so plainly")
    play(page, "tone-440.mp3")
    page.eval_on_selector("#fallback-audio", "a => a.play()")
    check(wait(lambda: page.eval_on_selector("#fallback-audio", "a => a.currentTime") > 1.0, 10),
          "the Ogg stream plays in the <audio> element instead")


BOT_TOKEN = os.environ.get("TONEARM_BOT_TOKEN", "test-bot-token")
SCENARIOS = {f.__name__: f for f in [isolation, stop, replace, controls, queue, errors, restart, guilds, search, fallback, stall]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("scenario", choices=SCENARIOS)
    parser.add_argument("--screenshots")
    args = parser.parse_args()
    if args.screenshots:
        os.makedirs(args.screenshots, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--no-sandbox", "--autoplay-policy=no-user-gesture-required",
                                          "--host-resolver-rules=MAP tonearm.test 127.0.0.1"])
        try:
            SCENARIOS[args.scenario](browser, args.url, args.screenshots)
        except Exception as error:  # a timeout or a missing element is a failure, with its reason
            check(False, f"{type(error).__name__}: {error}")
        finally:
            browser.close()
    if failures:
        print(f"{len(failures)} check(s) failed", flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
