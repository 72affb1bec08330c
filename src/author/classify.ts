/**
 * What a changed path is, for the author's tools: a test-side file (a test module, a conftest or a
 * helper under a tests folder), source code, or neither (docs, CI, data); and whether a change
 * touches distributed, parallel or memory code paths (the kind of change the InfraDev paper keeps).
 */

const CODE_EXT = /\.(py|pyi|cu|cuh|c|cc|cpp|cxx|h|hpp|rs|go)$/;

/** A pytest test module by name: test_*.py or *_test.py. */
export function isTestModule(path: string): boolean {
  const base = path.split("/").pop()!;
  return /^test_.*\.py$/.test(base) || /_test\.py$/.test(base);
}

/** A file the tests own: a test module, a conftest.py, or anything under a tests / test / testing folder. */
export function isTestPath(path: string): boolean {
  const parts = path.split("/");
  const base = parts[parts.length - 1]!;
  return isTestModule(path) || base === "conftest.py" || parts.slice(0, -1).some((p) => p === "tests" || p === "test" || p === "testing");
}

/** Source code outside the tests (what the golden patch is made of). */
export function isCodePath(path: string): boolean {
  return CODE_EXT.test(path) && !isTestPath(path);
}

/** Path words that mark distributed, parallel or memory code. */
const INFRA_PATH = /(^|[/_.-])(distributed|dist|parallel|parallel_state|fsdp|ddp|zero|shard\w*|pipeline\w*|tensor_parallel|comm\w*|collective\w*|nccl|rpc|memory|mem|alloc\w*|buffer\w*|bucket\w*|cache\w*|kv\w*|paged\w*|offload\w*|cuda_graph\w*|graphs?|quantiz\w*|optimizer\w*|param_and_grad\w*|rollout\w*|resharding)([/_.-]|$)/i;

/** Calls and names in the diff's lines that mark distributed, parallel or memory code. */
const INFRA_CODE = /\b(all_reduce|all_gather\w*|reduce_scatter\w*|broadcast|all_to_all\w*|barrier|send|recv|isend|irecv|process_group|new_group|get_\w*parallel\w*_(?:group|rank|world_size)|world_size|data_parallel\w*|tensor_parallel\w*|pipeline_parallel\w*|expert_parallel\w*|context_parallel\w*|torch\.distributed|dist\.\w+|cuda\.(?:synchronize|Stream|Event|graph|CUDAGraph|memory\w*|empty_cache|max_memory\w*)|empty_cache|pin_memory|non_blocking|record_stream|storage\(\)|untyped_storage|data_ptr|numel\(\)|memory|alloc\w*|evict\w*|ref_counts?|block_(?:ids?|table|bag)|kv_cache|bucket\w*|shard\w*|main_grad|grad_buffer|fp32|bf16|bfloat16|float32|overlap_\w+)\b/g;

export interface InfraEvidence {
  paths: string[];
  /** Distinct words of the diff's +/- lines, with their counts, most frequent first. */
  words: Array<[string, number]>;
}

export function infraPaths(paths: readonly string[]): string[] {
  return paths.filter((p) => isCodePath(p) && INFRA_PATH.test(p));
}

export function infraWords(diff: string): Array<[string, number]> {
  const counts = new Map<string, number>();
  for (const line of diff.split("\n")) {
    if (!/^[+-](?![+-]{2} )/.test(line)) continue;
    for (const m of line.matchAll(INFRA_CODE)) counts.set(m[1]!, (counts.get(m[1]!) ?? 0) + 1);
  }
  return [...counts].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
}

/** A short id for a task from a commit subject: lowercase words, at most five, no PR number. */
export function suggestedId(subject: string, prefix = ""): string {
  const words = subject
    .replace(/\(#\d+\)/g, "")
    .replace(/^\w+(\([^)]*\))?:\s*/, "")
    .toLowerCase()
    .match(/[a-z0-9]+/g) ?? ["change"];
  const id = `${prefix}${words.filter((w) => !["a", "an", "the", "of", "for", "to", "and", "in", "on", "with"].includes(w)).slice(0, 5).join("-")}`;
  return id.replace(/^-+/, "") || "change";
}
