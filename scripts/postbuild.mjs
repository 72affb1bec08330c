// Makes the built CLI executable (tsc does not keep the mode bit).
import { chmodSync, existsSync } from "node:fs";
const bin = new URL("../dist/cli/main.js", import.meta.url);
if (existsSync(bin)) chmodSync(bin, 0o755);
