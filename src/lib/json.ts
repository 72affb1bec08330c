import { readFileSync } from "node:fs";

/** A JSON file's value, or null when it is missing or not (yet) valid JSON (a writer may be mid-way). */
export function readJsonFile<T>(file: string): T | null {
  try {
    return JSON.parse(readFileSync(file, "utf8")) as T;
  } catch {
    return null;
  }
}
