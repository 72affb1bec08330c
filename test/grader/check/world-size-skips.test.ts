import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { classifyGoldSkips, parseProbeCaseId } from "../../../src/grader/check/world-size-skips.js";
import type { ScannedProbe } from "../../../src/grader/check/probe-markers.js";
import { hostPythonDir } from "../../../src/lib/paths.js";

const probe = (file: string, name: string, world_sizes: number[] | null): ScannedProbe => ({ file, line: 1, name, marker: { promise: "p", kind: "state", line: 1, problems: [], world_sizes } });

describe("gold skips and the world sizes a probe applies to", () => {
  it("reads the world size and the test from a case id (mode, ws prefix, parameters)", () => {
    expect(parseProbeCaseId("ws4/infradev_probes/test_r.py::test_reshard[a-b]", 2)).toEqual({ worldSize: 4, test: "test_r.py::test_reshard" });
    expect(parseProbeCaseId("eager/ws1/infradev_probes/sub/test_r.py::TestC::test_x", 2)).toEqual({ worldSize: 1, test: "sub/test_r.py::TestC::test_x" });
    expect(parseProbeCaseId("infradev_probes/test_r.py::test_x", 2)).toEqual({ worldSize: 2, test: "test_r.py::test_x" });
    expect(parseProbeCaseId("tests/test_official.py::test_x", 2)).toBeNull();
  });

  it("a skip is an error only where the probe applies; a probe that declares nothing applies everywhere", () => {
    const probes = [probe("test_r.py", "test_reshard", [4]), probe("test_r.py", "test_plain", null)];
    const got = classifyGoldSkips(
      ["ws2/infradev_probes/test_r.py::test_reshard[x]", "ws4/infradev_probes/test_r.py::test_reshard[x]", "ws2/infradev_probes/test_r.py::test_plain"],
      probes,
      2,
    );
    expect(got.map((s) => [s.worldSize, s.applies])).toEqual([
      [2, false],
      [4, true],
      [2, true],
    ]);
  });

  it("the static marker scan reads world_sizes=[...] and names a bad one", () => {
    const dir = mkdtempSync(join(tmpdir(), "infradev-ws-markers-"));
    try {
      writeFileSync(
        join(dir, "test_p.py"),
        "import pytest\n\n@pytest.mark.probe(promise='a', kind='state', world_sizes=[4, 8])\ndef test_ok():\n    pass\n\n@pytest.mark.probe(promise='a', kind='state', world_sizes=4)\ndef test_bad():\n    pass\n",
      );
      const out = JSON.parse(execFileSync("/usr/bin/python3", ["-I", "-S", join(hostPythonDir(), "infradev_markers.py"), dir], { encoding: "utf8" })) as { tests: ScannedProbe[] };
      const byName = Object.fromEntries(out.tests.map((t) => [t.name, t.marker]));
      expect(byName.test_ok?.world_sizes).toEqual([4, 8]);
      expect(byName.test_ok?.problems).toEqual([]);
      expect(byName.test_bad?.problems).toEqual(["world_sizes= is not a non-empty list of integer literals >= 1"]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
