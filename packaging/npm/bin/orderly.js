#!/usr/bin/env node
// `npx orderly ARGS`: runs the orderly binary with ARGS, passing on the signals that stop it
// and exiting as it exits.
import { spawn } from "node:child_process";
import { binaryPath } from "../index.js";

const child = spawn(binaryPath(), process.argv.slice(2), { stdio: "inherit" });
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) {
  process.on(signal, () => child.kill(signal));
}
child.on("error", (error) => {
  console.error(`orderly: ${error.message}`);
  process.exit(1);
});
child.on("exit", (code, signal) => {
  if (!signal) process.exit(code ?? 1);
  // Die of the same signal, so a caller sees what the server saw.
  process.removeAllListeners(signal);
  process.kill(process.pid, signal);
});
