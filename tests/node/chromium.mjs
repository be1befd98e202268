// Launching the system's Chromium (/usr/bin/chromium, or $COURTESY_CHROMIUM) headless through
// playwright-core, in a throwaway profile, for the browser checks (dashboard.mjs, trust.mjs).

import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

export const CHROMIUM = process.env.COURTESY_CHROMIUM || "/usr/bin/chromium";

/** Exits with status 2 (bad set-up) when Chromium is not installed. */
export function requireChromium(script) {
  if (!existsSync(CHROMIUM)) {
    console.error(`${script}: ${CHROMIUM} is missing; install it with: apt-get install -y chromium`);
    process.exit(2);
  }
}

/** Ends the process with `code` and `message` if the check has not finished after `ms`. */
export function watchdog(ms, code, message) {
  const timer = setTimeout(() => {
    console.error(message);
    process.exit(code);
  }, ms);
  timer.unref();
}

/**
 * A headless Chromium in a fresh profile with `args` added to the usual flags; returns the
 * context and a function that closes it and removes the profile.
 */
export async function launch({ args = [], viewport, proxy } = {}) {
  const profile = mkdtempSync(join(tmpdir(), "courtesy-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--no-sandbox",
      "--headless",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      ...args,
    ],
    ...(viewport ? { viewport } : {}),
    // Playwright's proxy option adds --proxy-bypass-list=<-loopback>: loopback goes through it too.
    ...(proxy ? { proxy } : {}),
    colorScheme: "light",
  });
  const close = async () => {
    await context.close().catch(() => {});
    rmSync(profile, { recursive: true, force: true });
  };
  return { context, close };
}
