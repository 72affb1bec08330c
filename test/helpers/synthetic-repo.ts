/**
 * A small git repository with a known history, made by the author-tool suites: a merge commit that
 * adds tests (PR #1), a PR without tests (#2), a PR reverted later (#3, reverted by its revert), a PR
 * that builds on #1 (#5) and one too small to be a task (#6). Dates are fixed, so the ranking is too.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";

export interface SyntheticRepo {
  dir: string;
  /** sha of each named commit. */
  sha: Record<"root" | "bucketMerge" | "util" | "speedup" | "revert" | "capacity" | "tiny", string>;
}

const lines = (n: number, f: (i: number) => string) => Array.from({ length: n }, (_, i) => f(i)).join("\n");

export function makeSyntheticRepo(dir: string): SyntheticRepo {
  let day = 1;
  const git = (args: string[], env: Record<string, string> = {}) => {
    const date = `2026-01-${String(day).padStart(2, "0")}T12:00:00Z`;
    return execFileSync("git", ["-C", dir, ...args], {
      encoding: "utf8",
      env: { ...process.env, GIT_AUTHOR_NAME: "dev", GIT_AUTHOR_EMAIL: "dev@example.invalid", GIT_COMMITTER_NAME: "dev", GIT_COMMITTER_EMAIL: "dev@example.invalid", GIT_AUTHOR_DATE: date, GIT_COMMITTER_DATE: date, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    }).trim();
  };
  const write = (rel: string, text: string) => {
    mkdirSync(dirname(join(dir, rel)), { recursive: true });
    writeFileSync(join(dir, rel), text.endsWith("\n") ? text : `${text}\n`);
  };
  const commit = (msg: string) => {
    git(["add", "-A"]);
    git(["commit", "-q", "--no-gpg-sign", "-m", msg]);
    day++;
    return git(["rev-parse", "HEAD"]);
  };
  mkdirSync(dir, { recursive: true });
  git(["init", "-q", "-b", "main"]);
  git(["config", "commit.gpgsign", "false"]);

  write("mini/__init__.py", "");
  write("mini/comm.py", `"""Process-group helpers."""\nimport os\n\n\ndef world_size():\n    return int(os.environ.get("WORLD_SIZE", "1"))\n\n\ndef split_evenly(n, parts):\n    base, extra = divmod(n, parts)\n    return [base + (1 if i < extra else 0) for i in range(parts)]\n`);
  write("tests/test_comm.py", `import os\n\nfrom mini.comm import split_evenly, world_size\n\n\ndef test_world_size_default():\n    assert world_size() >= 1\n`);
  const root = commit("Initial layout");

  // PR #1: a branch merged with a merge commit. It adds mini/bucket.py and its tests, and two tests
  // to test_comm.py: one of behaviour base already has, one that needs two ranks.
  git(["checkout", "-q", "-b", "dev/bucket"]);
  write(
    "mini/bucket.py",
    `"""Gradient buckets: parameters grouped so that one all_reduce serves many."""\nfrom mini.comm import world_size\n\n\nclass Bucket:\n    """A contiguous group of parameter sizes reduced together."""\n\n    def __init__(self, capacity):\n        self.capacity = capacity\n        self.sizes = []\n\n    def add(self, size):\n        """Adds a parameter of this many elements; False when the bucket is full."""\n        if sum(self.sizes) + size > self.capacity:\n            return False\n        self.sizes.append(size)\n        return True\n\n\ndef make_buckets(sizes, capacity):\n    """Splits parameter sizes into buckets of at most capacity elements (in order)."""\n    buckets = [Bucket(capacity)]\n    for s in sizes:\n        if not buckets[-1].add(s):\n            buckets.append(Bucket(capacity))\n            buckets[-1].add(s)\n    return buckets\n\n\ndef all_reduce_scale(total, buckets):\n    """The scale of one all_reduce of the buckets' sum: 1 / world size."""\n    return total / world_size()\n`,
  );
  write("tests/test_bucket.py", `import pytest\n\nfrom mini.bucket import Bucket, make_buckets\n\n\ndef test_bucket_refuses_overflow():\n    b = Bucket(4)\n    assert b.add(3) and not b.add(2)\n\n\n@pytest.mark.parametrize("capacity,expected", [(4, 3), (10, 1)])\ndef test_make_buckets_counts(capacity, expected):\n    assert len(make_buckets([3, 3, 3], capacity)) == expected\n`);
  write(
    "tests/test_comm.py",
    `import os\n\nfrom mini.comm import split_evenly, world_size\n\n\ndef test_world_size_default():\n    assert world_size() >= 1\n\n\ndef test_split_evenly_existing():\n    """Behaviour base already has."""\n    assert split_evenly(7, 3) == [3, 2, 2]\n\n\ndef test_needs_two_ranks():\n    assert int(os.environ.get("WORLD_SIZE", "1")) >= 2, "requires 2 GPUs"\n`,
  );
  commit("Add gradient buckets");
  git(["checkout", "-q", "main"]);
  git(["merge", "-q", "--no-ff", "--no-gpg-sign", "dev/bucket", "-m", "Merge pull request #1 from dev/bucket\n\nBucketed gradient sums: one all_reduce per bucket."]);
  day++;
  const bucketMerge = git(["rev-parse", "HEAD"]);

  // PR #2: code, no tests.
  write("mini/util.py", `"""Small helpers."""\n\n\n${lines(12, (i) => `def helper_${i}(x):\n    return x + ${i}\n`)}`);
  const util = commit("Add helper utilities (#2)");

  // PR #3, reverted by its revert.
  write("mini/comm.py", `"""Process-group helpers."""\nimport os\n\n\ndef world_size():\n    return int(os.environ.get("WORLD_SIZE", "1"))\n\n\ndef split_evenly(n, parts):\n    out = []\n${lines(30, (i) => `    # step ${i}`)}\n    base, extra = divmod(n, parts)\n    return [base + (1 if i < extra else 0) for i in range(parts)]\n`);
  write("tests/test_comm.py", `import os\n\nfrom mini.comm import split_evenly, world_size\n\n\ndef test_world_size_default():\n    assert world_size() >= 1\n\n\ndef test_split_evenly_existing():\n    """Behaviour base already has."""\n    assert split_evenly(7, 3) == [3, 2, 2]\n\n\ndef test_needs_two_ranks():\n    assert int(os.environ.get("WORLD_SIZE", "1")) >= 2, "requires 2 GPUs"\n\n\ndef test_split_sum():\n    assert sum(split_evenly(11, 4)) == 11\n`);
  const speedup = commit("Speed up split (#3)");
  git(["revert", "--no-edit", "--no-gpg-sign", "HEAD"]);
  day++;
  const revert = git(["rev-parse", "HEAD"]);

  // PR #5 builds on #1: a capacity rule in mini/bucket.py and its test.
  write(
    "mini/bucket.py",
    `"""Gradient buckets: parameters grouped so that one all_reduce serves many."""\nfrom mini.comm import world_size\n\n\nclass Bucket:\n    """A contiguous group of parameter sizes reduced together."""\n\n    def __init__(self, capacity):\n        if capacity <= 0:\n            raise ValueError("capacity must be positive")\n        self.capacity = capacity\n        self.sizes = []\n\n    def add(self, size):\n        """Adds a parameter of this many elements; False when the bucket is full."""\n        if self.sizes and sum(self.sizes) + size > self.capacity:\n            return False\n        self.sizes.append(size)\n        return True\n\n    def free(self):\n        """Elements left before the bucket is full (never below zero)."""\n        return max(0, self.capacity - sum(self.sizes))\n\n\ndef make_buckets(sizes, capacity):\n    """Splits parameter sizes into buckets of at most capacity elements (in order); a parameter\n    larger than the capacity gets a bucket of its own."""\n    buckets = [Bucket(capacity)]\n    for s in sizes:\n        if not buckets[-1].add(s):\n            buckets.append(Bucket(capacity))\n            buckets[-1].add(s)\n    return buckets\n\n\ndef all_reduce_scale(total, buckets):\n    """The scale of one all_reduce of the buckets' sum: 1 / world size."""\n    return total / world_size()\n\n\ndef bucket_bytes(buckets, element_size):\n    """Bytes each bucket moves in its all_reduce."""\n    return [sum(b.sizes) * element_size for b in buckets]\n`,
  );
  write("tests/test_bucket.py", `import pytest\n\nfrom mini.bucket import Bucket, bucket_bytes, make_buckets\n\n\ndef test_bucket_refuses_overflow():\n    b = Bucket(4)\n    assert b.add(3) and not b.add(2)\n\n\n@pytest.mark.parametrize("capacity,expected", [(4, 3), (10, 1)])\ndef test_make_buckets_counts(capacity, expected):\n    assert len(make_buckets([3, 3, 3], capacity)) == expected\n\n\ndef test_oversized_parameter_gets_its_own_bucket():\n    assert [b.sizes for b in make_buckets([2, 9, 2], 4)] == [[2], [9], [2]]\n\n\ndef test_bucket_bytes():\n    assert bucket_bytes(make_buckets([1, 2, 3], 3), 4) == [12, 12]\n`);
  const capacity = commit("Bucket capacity limit (#5)");

  // PR #6: too small.
  write("mini/comm.py", `"""Process-group helpers."""\nimport os\n\n\ndef world_size():\n    return max(1, int(os.environ.get("WORLD_SIZE", "1")))\n\n\ndef split_evenly(n, parts):\n    base, extra = divmod(n, parts)\n    return [base + (1 if i < extra else 0) for i in range(parts)]\n`);
  write("tests/test_comm.py", `import os\n\nfrom mini.comm import split_evenly, world_size\n\n\ndef test_world_size_default():\n    assert world_size() >= 1\n\n\ndef test_split_evenly_existing():\n    """Behaviour base already has."""\n    assert split_evenly(7, 3) == [3, 2, 2]\n\n\ndef test_needs_two_ranks():\n    assert int(os.environ.get("WORLD_SIZE", "1")) >= 2, "requires 2 GPUs"\n\n\ndef test_world_size_never_zero(monkeypatch):\n    monkeypatch.setenv("WORLD_SIZE", "0")\n    assert world_size() == 1\n`);
  const tiny = commit("Tiny fix (#6)");
  return { dir, sha: { root, bucketMerge, util, speedup, revert, capacity, tiny } };
}
