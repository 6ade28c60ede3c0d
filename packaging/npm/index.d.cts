export * from "./lib/orderly.cjs";
