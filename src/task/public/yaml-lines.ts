import { LineCounter, isNode, parseDocument } from "yaml";

/**
 * Line numbers of values in a YAML text, for messages that must name file AND line (a `breaks` typo,
 * an unknown promise). The schema check parses with `yaml.parse`; this re-parses the same text as a
 * document, which keeps source ranges.
 */
export function yamlLineOf(text: string, path: ReadonlyArray<string | number>): number | null {
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter });
  const node = doc.getIn(path, true);
  if (!isNode(node) || !node.range) return null;
  return lineCounter.linePos(node.range[0]).line;
}
