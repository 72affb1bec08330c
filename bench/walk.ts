/**
 * How far a reader walks to follow one entry point: every function reachable by calls from it (the
 * TypeScript checker resolves each call, imports and dynamic imports included), in the order a
 * depth-first reader meets them. Prints stops (functions), files, room changes, returns to a room
 * already left, and calls that climb back up the layering — the figures issue 20 asked for, measured
 * the same way on any tree (run it on an old checkout with --root and --layers to compare).
 *
 *   npx tsx bench/walk.ts [--root DIR] [--tsconfig F] FILE:FUNCTION [...]
 *     e.g. src/grader/grade/grade.ts:gradeSubmission src/campaign/run/run.ts:runAgentOnTask
 *   --layers "cli,campaign,server|grader,tools,runner,sandbox,task,lib"   (top first; | = same layer)
 *   --top-rooms   a room is a top-level folder (cli, grader, …), not each file's folder
 *   --json
 */
import { resolve, relative, dirname } from "node:path";
import ts from "typescript";

interface Args {
  root: string;
  tsconfig: string;
  entries: Array<{ file: string; fn: string }>;
  layers: string[][];
  json: boolean;
  /** Rooms as top-level folders only (1) or as the folder of each file (0, the default). */
  roomDepth: number;
}

function parseArgs(argv: string[]): Args {
  let root = process.cwd();
  let tsconfig = "tsconfig.json";
  let layers = "cli,campaign,server|grader,tools,runner,sandbox,task,lib";
  let json = false;
  let roomDepth = 0;
  const entries: Args["entries"] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === "--root") root = resolve(argv[++i]!);
    else if (a === "--tsconfig") tsconfig = argv[++i]!;
    else if (a === "--layers") layers = argv[++i]!;
    else if (a === "--json") json = true;
    else if (a === "--top-rooms") roomDepth = 1;
    else if (a.includes(":")) entries.push({ file: a.slice(0, a.lastIndexOf(":")), fn: a.slice(a.lastIndexOf(":") + 1) });
    else throw new Error(`walk: unknown argument ${a} (expected FILE:FUNCTION, --root, --tsconfig, --layers, --json)`);
  }
  if (!entries.length) throw new Error("walk: name at least one FILE:FUNCTION");
  return { root, tsconfig, entries, layers: layers.split(",").map((l) => l.split("|")), json, roomDepth };
}

type FnNode = ts.FunctionLikeDeclaration;

function isFn(n: ts.Node): n is FnNode {
  return ts.isFunctionDeclaration(n) || ts.isMethodDeclaration(n) || ts.isArrowFunction(n) || ts.isFunctionExpression(n) || ts.isConstructorDeclaration(n);
}

/** The function a declaration stands for: itself, a variable's initializer, or a class's constructor. */
function fnOf(decl: ts.Declaration): FnNode | null {
  if (isFn(decl)) return decl;
  if (ts.isVariableDeclaration(decl) && decl.initializer && isFn(decl.initializer)) return decl.initializer;
  if (ts.isClassDeclaration(decl)) return decl.members.find(ts.isConstructorDeclaration) ?? null;
  return null;
}

function nameOf(fn: FnNode): string {
  if (ts.isConstructorDeclaration(fn)) return `${(fn.parent as ts.ClassDeclaration).name?.text ?? "class"}.constructor`;
  if ((ts.isFunctionDeclaration(fn) || ts.isMethodDeclaration(fn)) && fn.name) {
    const cls = ts.isMethodDeclaration(fn) && ts.isClassDeclaration(fn.parent) ? `${fn.parent.name?.text}.` : "";
    return cls + fn.name.getText();
  }
  if (ts.isVariableDeclaration(fn.parent)) return fn.parent.name.getText();
  return "(anonymous)";
}

function main(): void {
  const args = parseArgs(process.argv.slice(2));
  const cfgPath = resolve(args.root, args.tsconfig);
  const cfg = ts.readConfigFile(cfgPath, ts.sys.readFile);
  const parsed = ts.parseJsonConfigFileContent(cfg.config, ts.sys, dirname(cfgPath));
  const program = ts.createProgram(parsed.fileNames, parsed.options);
  const checker = program.getTypeChecker();
  const inProject = (sf: ts.SourceFile) => !sf.isDeclarationFile && !sf.fileName.includes("/node_modules/");
  const rel = (f: string) => relative(args.root, f);
  const room = (f: string) => {
    const parts = rel(f).split("/");
    const start = parts[0] === "src" ? 1 : 0;
    const folder = parts.slice(start, -1).join("/") || parts[start]!;
    return args.roomDepth === 1 ? folder.split("/")[0]! : folder;
  };
  const layerOf = (f: string) => {
    const top = room(f).split("/")[0]!.replace(/^tasks$/, "task");
    const i = args.layers.findIndex((l) => l.includes(top));
    return i < 0 ? args.layers.length : i;
  };

  const resolveCallee = (expr: ts.Expression): FnNode | null => {
    let sym = checker.getSymbolAtLocation(ts.isPropertyAccessExpression(expr) ? expr.name : expr);
    if (!sym) return null;
    if (sym.flags & ts.SymbolFlags.Alias) sym = checker.getAliasedSymbol(sym);
    for (const d of sym.declarations ?? []) {
      if (ts.isBindingElement(d)) {
        // `const { f } = await import("./x.js")`: the binding's type names the real function.
        const t = checker.getTypeAtLocation(d);
        const real = t.symbol?.declarations?.[0];
        const fn = real ? fnOf(real) : null;
        if (fn && inProject(fn.getSourceFile())) return fn;
        continue;
      }
      const fn = fnOf(d);
      if (fn && inProject(fn.getSourceFile())) return fn;
    }
    return null;
  };

  const report = args.entries.map(({ file, fn }) => {
    const sf = program.getSourceFile(resolve(args.root, file));
    if (!sf) throw new Error(`walk: ${file} is not in the program of ${cfgPath}`);
    let start: FnNode | null = null;
    sf.forEachChild(function find(n) {
      if (!start && isFn(n) && nameOf(n) === fn) start = n;
      else if (!start && ts.isVariableStatement(n)) n.declarationList.declarations.forEach((d) => d.initializer && isFn(d.initializer) && d.name.getText() === fn && (start = d.initializer));
      else if (!start) n.forEachChild(find);
    });
    if (!start) throw new Error(`walk: no function ${fn} in ${file}`);
    const visited = new Set<FnNode>();
    const stops: Array<{ fn: string; file: string; depth: number }> = [];
    let climbs = 0;
    const visit = (f: FnNode, depth: number) => {
      visited.add(f);
      const file = f.getSourceFile().fileName;
      stops.push({ fn: nameOf(f), file: rel(file), depth });
      const callees: FnNode[] = [];
      const scan = (n: ts.Node) => {
        if ((ts.isCallExpression(n) || ts.isNewExpression(n)) && n.expression) {
          const c = resolveCallee(n.expression);
          if (c && !callees.includes(c)) callees.push(c);
        }
        n.forEachChild(scan);
      };
      if (f.body) scan(f.body);
      for (const c of callees) {
        if (visited.has(c)) continue;
        if (layerOf(c.getSourceFile().fileName) < layerOf(file)) climbs++;
        visit(c, depth + 1);
      }
    };
    visit(start, 0);
    const rooms = stops.map((s) => room(resolve(args.root, s.file)));
    let changes = 0;
    let returns = 0;
    const seen = new Set<string>([rooms[0]!]);
    for (let i = 1; i < rooms.length; i++) {
      if (rooms[i] === rooms[i - 1]) continue;
      changes++;
      if (seen.has(rooms[i]!)) returns++;
      seen.add(rooms[i]!);
    }
    const fileVisits = new Map<string, number>();
    stops.forEach((s, i) => {
      if (i === 0 || stops[i - 1]!.file !== s.file) fileVisits.set(s.file, (fileVisits.get(s.file) ?? 0) + 1);
    });
    const mostEntered = [...fileVisits.entries()].sort((a, b) => b[1] - a[1])[0]!;
    return {
      entry: `${file}:${fn}`,
      stops: stops.length,
      files: new Set(stops.map((s) => s.file)).size,
      rooms: seen.size,
      room_changes: changes,
      returns_to_a_room_left: returns,
      calls_climbing_up: climbs,
      most_entered_file: { file: mostEntered[0], times: mostEntered[1] },
    };
  });
  if (args.json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  else
    for (const r of report)
      process.stdout.write(
        `${r.entry}: ${r.stops} stops in ${r.files} files and ${r.rooms} rooms; ${r.room_changes} room changes, ${r.returns_to_a_room_left} returns to a room already left, ${r.calls_climbing_up} calls climbing back up; most entered: ${r.most_entered_file.file} (${r.most_entered_file.times}×)\n`,
      );
}

main();
