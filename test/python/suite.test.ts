import { execa } from "execa";
import { expect, it } from "vitest";
import { packageRoot } from "../../src/lib/paths.js";

// The Python side (rank launcher, probe library, plugin) has its own pytest suite with real gloo
// ranks; it runs as part of `npm test` through this wrapper so one command covers both languages.
it("test/python passes under /usr/bin/python3", async () => {
  const r = await execa("/usr/bin/python3", ["-m", "pytest", "-q", "-p", "no:cacheprovider", "test/python"], {
    cwd: packageRoot(),
    reject: false,
    all: true,
    timeout: 900_000,
    env: { PYTHONDONTWRITEBYTECODE: "1" },
  });
  const tail = (r.all ?? "").split("\n").slice(-40).join("\n");
  expect(r.exitCode, tail).toBe(0);
  expect(tail).toMatch(/\d+ passed/);
}, 900_000);
