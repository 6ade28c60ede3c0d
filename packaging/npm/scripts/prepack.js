// `npm pack` / `npm publish`: copies the release binary into vendor/ (stripped, when `strip`
// is at hand) after checking this package's version is the crate's.
// The binary: $ORDERLY_BINARY, else the repository's target/release/orderly
// (`cargo build --release` first).
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const root = path.resolve(here, "..", "..");
const exe = process.platform === "win32" ? "orderly.exe" : "orderly";
const source = process.env.ORDERLY_BINARY || path.join(root, "target", "release", exe);

const cargo = fs.readFileSync(path.join(root, "Cargo.toml"), "utf8");
const crateVersion = /^version\s*=\s*"([^"]+)"/m.exec(cargo)?.[1];
const { version } = JSON.parse(fs.readFileSync(path.join(here, "package.json"), "utf8"));
if (version !== crateVersion) {
  console.error(`package.json says ${version}, Cargo.toml ${crateVersion}: make them the same`);
  process.exit(1);
}
if (!fs.existsSync(source)) {
  console.error(`no binary at ${source}: run \`cargo build --release\`, or set ORDERLY_BINARY`);
  process.exit(1);
}
const vendor = path.join(here, "vendor");
fs.mkdirSync(vendor, { recursive: true });
const target = path.join(vendor, exe);
fs.copyFileSync(source, target);
fs.chmodSync(target, 0o755);
// The release profile keeps line tables for profiling; the package need not carry them.
const stripped = spawnSync("strip", [target], { stdio: "inherit" });
const size = (fs.statSync(target).size / 1024 / 1024).toFixed(1);
console.error(`vendor/${exe}: ${size} MiB from ${source}${stripped.status === 0 ? ", stripped" : ""}`);
