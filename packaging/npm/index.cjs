"use strict";
// CommonJS entry: `const { startOrderly } = require("orderly-server")`.
module.exports = require("./lib/orderly.cjs");
