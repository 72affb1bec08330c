#!/usr/bin/env node
// One-step set-up for a fresh machine, used by the README's two commands (`npm run demo`, `npm test`):
// Node dependencies (npm ci when the lock changed), the TypeScript build, and the Python side
// (torch + pytest for /usr/bin/python3, bubblewrap). Only Node built-ins here: this runs before
// node_modules exists.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const say = (msg) => process.stderr.write(`[setup] ${msg}\n`);
const run = (cmd, args, opts = {}) => {
  say(`$ ${cmd} ${args.join(" ")}`);
  const r = spawnSync(cmd, args, { cwd: root, stdio: ["ignore", process.stderr, process.stderr], ...opts });
  if (r.error) throw new Error(`${cmd}: ${r.error.message}`);
  if (r.status !== 0) {
    say(`failed: ${cmd} ${args.join(" ")} (exit ${r.status})`);
    process.exit(r.status ?? 1);
  }
};
const quiet = (cmd, args) => spawnSync(cmd, args, { stdio: "ignore" }).status === 0;

// 1. Node dependencies, reinstalled only when package-lock.json changed.
const lock = join(root, "package-lock.json");
const stamp = join(root, "node_modules", ".infradev-lock-sha256");
const lockHash = createHash("sha256").update(readFileSync(lock)).digest("hex");
if (!existsSync(stamp) || readFileSync(stamp, "utf8").trim() !== lockHash) {
  // `npm install` with the lock file, not `npm ci`: a harness binary (opencode-ai) ships one package
  // per platform as optional dependencies, a registry may serve only this platform's, and `npm ci`
  // then refuses the lock as "out of sync" although every package this machine needs is in it.
  run("npm", ["install", "--no-audit", "--no-fund"]);
  writeFileSync(stamp, `${lockHash}\n`);
}

// 2. Build, skipped when no source changed since the last one (tsc takes 10-50 s on a loaded
// 2-core machine): the stamp is a hash of every TypeScript source, tsconfig and the lock file.
const buildStamp = join(root, "dist", ".infradev-build-sha256");
const buildHash = sourcesHash();
if (existsSync(join(root, "dist", "cli", "main.js")) && existsSync(buildStamp) && readFileSync(buildStamp, "utf8").trim() === buildHash) {
  say("build up to date (no TypeScript source changed)");
} else {
  run("npm", ["run", "--silent", "build"]);
  writeFileSync(buildStamp, `${buildHash}\n`);
}

// `npx infradev ...` in this folder: npm links the bins of dependencies, not the package's own.
const shim = join(root, "node_modules", ".bin", "infradev");
if (!existsSync(shim)) {
  mkdirSync(dirname(shim), { recursive: true });
  symlinkSync(join("..", "..", "dist", "cli", "main.js"), shim);
}

function sourcesHash() {
  const h = createHash("sha256");
  const walk = (dir) => {
    for (const e of readdirSync(dir, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
      if (e.name === "node_modules" || e.name === "dist" || e.name.startsWith(".")) continue;
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.isFile() && e.name.endsWith(".ts")) h.update(`${p}\0`).update(readFileSync(p)).update("\0");
    }
  };
  walk(join(root, "src"));
  for (const f of ["tsconfig.json", "package-lock.json", "scripts/postbuild.mjs"]) if (existsSync(join(root, f))) h.update(f).update(readFileSync(join(root, f)));
  return h.digest("hex");
}

// 3. Python side. Tasks name their interpreter; the bundled ones use Debian's /usr/bin/python3.
const python = process.env.INFRADEV_PYTHON ?? "/usr/bin/python3";
const pythonOk = existsSync(python) && quiet(python, ["-c", "import torch, pytest"]);
const bwrapOk = quiet("bwrap", ["--version"]);
if (!pythonOk || !bwrapOk) {
  const pkgs = ["python3-torch", "python3-pytest", "bubblewrap"];
  const debian = existsSync("/etc/debian_version");
  const isRoot = process.getuid?.() === 0;
  if (debian && isRoot && process.env.INFRADEV_NO_APT !== "1") {
    say(`installing ${pkgs.join(" ")} with apt (torch + pytest for ${python}: ${pythonOk ? "ok" : "missing"}; bwrap: ${bwrapOk ? "ok" : "missing"})`);
    run("apt-get", ["update", "-qq"]);
    run("apt-get", ["install", "-y", "-qq", "--no-install-recommends", ...pkgs], { env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" } });
  } else {
    say(`missing: ${!pythonOk ? `torch/pytest for ${python} ` : ""}${!bwrapOk ? "bubblewrap" : ""}`);
    say(
      debian
        ? `run as root: apt-get update && apt-get install -y ${pkgs.join(" ")}`
        : `install PyTorch and pytest for ${python} (or set INFRADEV_PYTHON to an interpreter that has them) and bubblewrap (https://github.com/containers/bubblewrap), then re-run`,
    );
    process.exit(1);
  }
}
// The helpers are mounted read-only into the sandbox, where Python cannot cache bytecode: compile
// them once here so every launcher and rank start skips it (~20 ms each).
if (existsSync(python)) spawnSync(python, ["-m", "compileall", "-q", join(root, "python", "sandbox")], { stdio: "ignore" });
say("ready");
