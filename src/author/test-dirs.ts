/**
 * The test folders of a PR: the folders of the test-side files it adds or changes, none inside
 * another. The grader replaces each with merge's version (task.yaml `test_dirs`), and `curate --run`
 * swaps the same folders into the base, so both see the post-PR tests the same way.
 */

export function testDirsFor(testFiles: readonly string[]): string[] {
  const dirs = [...new Set(testFiles.map((f) => f.split("/").slice(0, -1).join("/")).filter(Boolean))].sort();
  return dirs.filter((d) => !dirs.some((o) => o !== d && d.startsWith(`${o}/`)));
}
