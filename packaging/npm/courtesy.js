#!/usr/bin/env node
// The `courtesy` command of the npm package `courtesy-proxy`: finds the binary that the platform's
// own package (`@courtesy-proxy/<os>-<cpu>[-<libc>]`, one of the optionalDependencies, the one npm
// installed for this machine) carries, and runs it with this command's arguments, standard streams
// and exit status. Signals sent to this process (Ctrl-C, a supervisor's SIGTERM) reach courtesy, so
// that it drains its requests as it does when run directly. COURTESY_BINARY names another binary.
"use strict";

const { spawn } = require("node:child_process");
const path = require("node:path");

/** The C library this Linux runs on ("gnu" or "musl"), as npm's `libc` field names it. */
function linuxLibc() {
  const report = typeof process.report?.getReport === "function" ? process.report.getReport() : null;
  return report?.header?.glibcVersionRuntime ? "gnu" : "musl";
}

/** The name of the package that carries this platform's binary. */
function platformPackage() {
  const base = `@courtesy-proxy/${process.platform}-${process.arch}`;
  return process.platform === "linux" ? `${base}-${linuxLibc()}` : base;
}

/** The binary's path, or a message saying why there is none. */
function findBinary() {
  if (process.env.COURTESY_BINARY) return { binary: process.env.COURTESY_BINARY };
  const pkg = platformPackage();
  const exe = process.platform === "win32" ? "courtesy.exe" : "courtesy";
  try {
    const manifest = require.resolve(`${pkg}/package.json`);
    return { binary: path.join(path.dirname(manifest), "bin", exe) };
  } catch {
    return {
      problem:
        `courtesy-proxy: no binary for this platform: the package ${pkg} is not installed.\n` +
        "It is an optional dependency of courtesy-proxy, installed by npm only on its own platform: " +
        "reinstall without --no-optional / --omit=optional, or on a platform courtesy is built for " +
        "(see the package's README), or set COURTESY_BINARY to a courtesy binary.",
    };
  }
}

const found = findBinary();
if (found.problem) {
  process.stderr.write(found.problem + "\n");
  process.exit(1);
}

const child = spawn(found.binary, process.argv.slice(2), { stdio: "inherit" });
const forwarded = ["SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT"];
for (const signal of forwarded) {
  process.on(signal, () => child.kill(signal));
}
child.on("error", (err) => {
  process.stderr.write(`courtesy-proxy: cannot run ${found.binary}: ${err.message}\n`);
  process.exit(1);
});
child.on("exit", (code, signal) => {
  if (signal) {
    for (const s of forwarded) process.removeAllListeners(s);
    process.kill(process.pid, signal);
    return;
  }
  process.exit(code ?? 1);
});
