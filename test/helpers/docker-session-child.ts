/**
 * A stand-in for a server process that owns a docker sandbox: creates one on the test image, prints
 * `READY <container id> <pid>` and waits to be killed (it never calls close()). The prune suite kills it
 * with SIGKILL and checks that `pruneSandboxes` removes the orphaned container.
 *
 *   npx tsx test/helpers/docker-session-child.ts <workspace> <session id>
 */
import { createDockerSandbox } from "../../src/sandbox/docker/create.js";
import { TEST_IMAGE } from "./docker-image.js";

const [workspace, sessionId] = process.argv.slice(2);
if (!workspace || !sessionId) {
  console.error("usage: docker-session-child.ts <workspace> <session id>");
  process.exit(2);
}
const sb = await createDockerSandbox({ hostRepoDir: workspace, image: TEST_IMAGE, sessionId, hostSystemMounts: true, memoryMb: 256, shmSizeMb: 64 });
console.log(`READY ${sb.containerId} ${process.pid}`);
setInterval(() => undefined, 1 << 30);
