// A Chromium that the Python tests drive one command at a time: one JSON command a line on stdin, one JSON
// answer a line on stdout ({"ok": true, "value": ...} or {"ok": false, "error": "..."}). Python decides the
// order of things (the gates of localkube), so nothing here waits on the clock but Playwright's own
// auto-waiting, bounded by each command's timeout. playwright-core comes from the Training tab's node_modules
// (NODE_PATH); the browser is Debian's chromium.
const readline = require("node:readline");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const { chromium } = require("playwright-core");

const FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

let context = null;
let page = null;

async function open(colorScheme) {
  if (context) await context.close();
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "training-tab-chromium-"));
  context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    args: FLAGS,
    viewport: { width: 1400, height: 1500 },
    colorScheme: colorScheme ?? "light",
    locale: "en-US",
    timezoneId: "UTC",
  });
  page = context.pages()[0] ?? (await context.newPage());
  page.on("console", (m) => process.stderr.write(`[console.${m.type()}] ${m.text()}\n`));
  page.on("pageerror", (e) => process.stderr.write(`[pageerror] ${e.message}\n`));
}

/** The locator of `{testid}` or `{css}`, narrowed to the element holding `text` when given. */
function locate({ testid, css, text }) {
  let locator = testid ? page.getByTestId(testid) : page.locator(css);
  if (text) locator = locator.filter({ hasText: text });
  return locator;
}

const COMMANDS = {
  /** A fresh profile (no cookies): a new user. */
  async open({ colorScheme }) {
    await open(colorScheme);
  },
  /** SimpleAuthManager's login form, then wait to be sent on to `next`. */
  async login({ base, username, password, next, timeout }) {
    await page.goto(`${base}/auth/login?next=${encodeURIComponent(next)}`);
    await page.locator("input[name=username]").fill(username);
    await page.locator("input[name=password]").fill(password);
    await page.locator("button[type=submit]").click();
    await page.waitForURL((url) => !url.pathname.startsWith("/auth/"), { timeout });
    return page.url();
  },
  async goto({ url }) {
    await page.goto(url);
  },
  async click({ timeout, ...where }) {
    await locate(where).first().click({ timeout });
  },
  /** Wait until an element matching `where` (and holding `text`) is visible; returns its text. */
  async wait({ timeout, ...where }) {
    const locator = locate(where).first();
    await locator.waitFor({ state: "visible", timeout });
    return await locator.innerText();
  },
  async attribute({ name, timeout, ...where }) {
    return await locate(where).first().getAttribute(name, { timeout });
  },
  async texts(where) {
    return await locate(where).allInnerTexts();
  },
  async screenshot({ path: file }) {
    await page.screenshot({ path: file, fullPage: true, animations: "disabled", caret: "hide" });
  },
  async close() {
    if (context) await context.close();
    context = null;
  },
};

async function main() {
  const lines = readline.createInterface({ input: process.stdin });
  for await (const line of lines) {
    const { command, ...args } = JSON.parse(line);
    let answer;
    try {
      answer = { ok: true, value: (await COMMANDS[command](args)) ?? null };
    } catch (error) {
      answer = { ok: false, error: String(error && error.stack ? error.stack : error) };
    }
    process.stdout.write(`${JSON.stringify(answer)}\n`);
  }
  if (context) await context.close();
}

main().catch((error) => {
  process.stderr.write(`${error.stack ?? error}\n`);
  process.exit(1);
});
