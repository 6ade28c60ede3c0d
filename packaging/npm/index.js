// ESM entry: `import { startOrderly } from "orderly-server"` (the implementation is CommonJS,
// shared with `require`).
import orderly from "./lib/orderly.cjs";

export const { startOrderly, binaryPath, settingsToArgs } = orderly;
