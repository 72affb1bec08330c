/** Paths the suites share, independent of how deep a test file sits in test/ (it mirrors src/). */
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository root (the folder of package.json). */
export const REPO_ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
/** test/fixtures: small tasks and campaign folders the suites copy before they change anything. */
export const TEST_FIXTURES = join(REPO_ROOT, "test", "fixtures");
