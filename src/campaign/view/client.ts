/**
 * The viewer's one script, inlined into view.html (its CSP allows this script by hash and nothing
 * else: no request leaves the page). It reads the JSON block the page carries and draws: the runs
 * table with its filters, one run (trajectory, patch, grade, scan, resources and cost), and two runs
 * of one task side by side. A trajectory is drawn as a virtual list: only the rows in view (plus a
 * margin) exist in the DOM, so a run of 10,000 events scrolls and filters like one of ten.
 *
 * Plain ES2020, no template literals (this file is a string in TypeScript).
 */
export const VIEW_CLIENT_JS = String.raw`
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("view-data").textContent);
  var ROW = 24;
  var $ = function (id) { return document.getElementById(id); };
  function el(tag, attrs, kids) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) { if (k === "text") e.textContent = attrs[k]; else if (k === "cls") e.className = attrs[k]; else e.setAttribute(k, attrs[k]); }
    (kids || []).forEach(function (c) { e.appendChild(typeof c === "string" ? document.createTextNode(c) : c); });
    return e;
  }
  function usd(v) { return v === null || v === undefined ? "–" : "$" + v.toFixed(v >= 0.1 || v === 0 ? 2 : 4); }
  function n0(v) { return v === null || v === undefined ? "–" : Math.round(v).toLocaleString("en-US"); }
  function verdict(r) { return r.status !== "graded" ? r.status : r.resolved ? "resolved" : "not resolved"; }
  function uniq(xs) { return xs.filter(function (x, i) { return xs.indexOf(x) === i; }).sort(); }
  function fill(sel, values) { values.forEach(function (v) { sel.appendChild(el("option", { value: v, text: v })); }); }

  fill($("f-task"), uniq(D.runs.map(function (r) { return r.task_id; })));
  fill($("f-agent"), uniq(D.runs.map(function (r) { return r.agent; })));
  fill($("f-verdict"), uniq(D.runs.map(verdict)));

  function drawRuns() {
    var t = $("f-task").value, a = $("f-agent").value, v = $("f-verdict").value, f = $("f-flagged").value;
    var body = $("runs-body");
    body.textContent = "";
    var shown = 0;
    D.runs.forEach(function (r, idx) {
      if ((t && r.task_id !== t) || (a && r.agent !== a) || (v && verdict(r) !== v)) return;
      if ((f === "flagged" && !r.flagged) || (f === "clean" && r.flagged)) return;
      shown++;
      var tr = el("tr", { "data-run": r.run_id }, [
        el("td", {}, [el("a", { href: "#run=" + encodeURIComponent(r.run_id), text: r.run_id })]),
        el("td", { text: r.task_id }), el("td", { text: r.agent }), el("td", { text: r.model }),
        el("td", { text: verdict(r), cls: r.resolved ? "ok" : r.status === "graded" ? "bad" : "" }),
        el("td", { text: r.score === null ? "–" : r.score.toFixed(3) }),
        el("td", { text: r.flagged === null ? "–" : r.flagged ? "flagged" : "no", cls: r.flagged ? "flag" : "" }),
        el("td", { text: String(r.n_events) }),
        el("td", { text: (r.wall_s / 60).toFixed(1) + " min" }),
        el("td", { text: usd(r.cost_usd) })
      ]);
      body.appendChild(tr);
    });
    $("runs-count").textContent = shown + " of " + D.runs.length + " run(s)";
  }
  ["f-task", "f-agent", "f-verdict", "f-flagged"].forEach(function (id) { $(id).addEventListener("change", drawRuns); });

  function byId(id) { for (var i = 0; i < D.runs.length; i++) if (D.runs[i].run_id === id) return D.runs[i]; return null; }

  function summary(e) {
    if (e.kind === "turn") return (e.text || "(model request)").replace(/\s+/g, " ").slice(0, 160);
    if (e.kind === "session") return e.text;
    var a = e.args && (e.args.command || e.args.paths || e.args.tests || e.args.symbol);
    return e.tool + (a ? " " + (typeof a === "string" ? a : JSON.stringify(a)).replace(/\s+/g, " ").slice(0, 140) : "");
  }
  function meta(e) {
    var m = [];
    if (e.duration_ms !== null && e.duration_ms !== undefined) m.push((e.duration_ms / 1000).toFixed(1) + " s");
    if (e.exit_code !== null && e.exit_code !== undefined) m.push("exit " + e.exit_code);
    if (e.is_error) m.push("error");
    if (e.tokens) m.push(n0(e.tokens.input) + " in / " + n0(e.tokens.output) + " out" + (e.tokens.scope === "attempt" ? " (attempt)" : ""));
    if (e.cost_usd !== null && e.cost_usd !== undefined) m.push(usd(e.cost_usd));
    return m.join(" · ");
  }

  /** A virtual list of one run's events in a scroller: only the visible rows exist. */
  function trajectory(host, run, onPick) {
    host.textContent = "";
    var kind = el("select", { cls: "t-kind" }, [el("option", { value: "", text: "all events" }), el("option", { value: "turn", text: "model turns" }), el("option", { value: "tool", text: "tool calls" }), el("option", { value: "error", text: "errors / non-zero exit" })]);
    var q = el("input", { cls: "t-filter", placeholder: "filter (tool, text, arguments)", type: "search" });
    var count = el("span", { cls: "t-count" });
    var scroller = el("div", { cls: "t-scroll" });
    var spacer = el("div", { cls: "t-spacer" });
    scroller.appendChild(spacer);
    host.appendChild(el("div", { cls: "t-bar" }, [kind, q, count]));
    host.appendChild(scroller);
    var rows = run.events, shown = rows;
    function hay(e) { return e._h || (e._h = (summary(e) + " " + JSON.stringify(e.args || "") + " " + (e.result || "")).toLowerCase()); }
    function apply() {
      var k = kind.value, s = q.value.toLowerCase();
      shown = rows.filter(function (e) {
        if (k === "error") { if (!(e.is_error || (e.exit_code !== null && e.exit_code !== undefined && e.exit_code !== 0))) return false; }
        else if (k && e.kind !== k) return false;
        return !s || hay(e).indexOf(s) >= 0;
      });
      spacer.style.height = shown.length * ROW + "px";
      count.textContent = shown.length + " of " + rows.length + " event(s)";
      scroller.scrollTop = 0;
      draw();
    }
    function draw() {
      var first = Math.max(0, Math.floor(scroller.scrollTop / ROW) - 10);
      var last = Math.min(shown.length, Math.ceil((scroller.scrollTop + scroller.clientHeight) / ROW) + 10);
      spacer.textContent = "";
      for (var i = first; i < last; i++) {
        var e = shown[i];
        var row = el("div", { cls: "t-row k-" + e.kind + (e.is_error || (e.exit_code && e.exit_code !== 0) ? " err" : ""), "data-i": String(e.i) }, [
          el("span", { cls: "t-i", text: "#" + e.i }), el("span", { cls: "t-k", text: e.kind === "tool" ? "tool" : e.kind }),
          el("span", { cls: "t-s", text: summary(e) }), el("span", { cls: "t-m", text: meta(e) })
        ]);
        row.style.top = i * ROW + "px";
        row.addEventListener("click", (function (ev) { return function () { onPick(ev); }; })(e));
        spacer.appendChild(row);
      }
    }
    var pending = false;
    scroller.addEventListener("scroll", function () { if (!pending) { pending = true; requestAnimationFrame(function () { pending = false; draw(); }); } });
    kind.addEventListener("change", apply);
    q.addEventListener("input", apply);
    apply();
  }

  function detail(host, e) {
    host.textContent = "";
    host.appendChild(el("h4", { text: "#" + e.i + " " + (e.kind === "tool" ? e.tool : e.kind) + (e.ts ? " · " + e.ts : "") + (meta(e) ? " · " + meta(e) : "") }));
    if (e.text) host.appendChild(el("pre", { text: e.text }));
    if (e.kind === "tool") {
      host.appendChild(el("div", { cls: "lbl", text: "arguments" }));
      host.appendChild(el("pre", { text: JSON.stringify(e.args, null, 2) }));
      host.appendChild(el("div", { cls: "lbl", text: "result" + (e.result_bytes ? " (" + n0(e.result_bytes) + " bytes" + (e.result_truncated ? ", head and tail shown" : "") + ")" : "") }));
      host.appendChild(el("pre", { text: e.result || "(not recorded)" }));
    }
  }

  function diff(host, patch) {
    host.textContent = "";
    if (!patch) { host.appendChild(el("p", { text: "no patch" })); return; }
    var pre = el("pre", { cls: "diff" });
    patch.split("\n").forEach(function (l) {
      var c = l.indexOf("+++") === 0 || l.indexOf("---") === 0 || l.indexOf("diff ") === 0 ? "d-h" : l[0] === "+" ? "d-a" : l[0] === "-" ? "d-r" : l.indexOf("@@") === 0 ? "d-at" : "";
      pre.appendChild(el("span", { cls: c, text: l + "\n" }));
    });
    host.appendChild(pre);
  }

  function table(head, rows, id) {
    var t = el("table", id ? { id: id } : {}, [el("thead", {}, [el("tr", {}, head.map(function (h) { return el("th", { text: h }); }))])]);
    var b = el("tbody");
    rows.forEach(function (r) { b.appendChild(el("tr", {}, r.map(function (c) { return el("td", { text: c }); }))); });
    t.appendChild(b);
    return t;
  }

  function runHeader(r) {
    var tk = r.tokens;
    return el("div", { cls: "sum" }, [
      el("h2", { text: r.run_id }),
      el("p", { text: r.agent + " · " + r.model + " · " + r.harness + " · " + verdict(r) + (r.score === null ? "" : " · s_p " + r.score.toFixed(3)) + " · exit " + r.exit_reason }),
      el("p", { cls: "res", text: "resources: " + (r.wall_s / 60).toFixed(1) + " min · " + r.tool_calls + " tool call(s) · " + (r.turns === null ? "–" : r.turns) + " model request(s) · tokens in " + n0(tk.input) + " (cached " + n0(tk.cached_input) + ") / out " + n0(tk.output) + " (reasoning " + n0(tk.reasoning) + ") · cost " + usd(r.cost_usd) + " · patch " + n0(r.patch_bytes) + " bytes · turns from " + r.turns_from })
    ]);
  }

  function showRun(id) {
    var r = byId(id);
    var host = $("run");
    host.textContent = "";
    if (!r) { host.hidden = true; return; }
    host.hidden = false;
    host.appendChild(runHeader(r));
    var others = D.runs.filter(function (o) { return o.task_id === r.task_id && o.run_id !== r.run_id; });
    if (others.length) {
      var pick = el("select", { id: "pair-with" }, [el("option", { value: "", text: "compare with another run of " + r.task_id + "…" })]);
      others.forEach(function (o) { pick.appendChild(el("option", { value: o.run_id, text: o.run_id + " (" + verdict(o) + ")" })); });
      pick.addEventListener("change", function () { if (pick.value) location.hash = "pair=" + encodeURIComponent(r.run_id) + "," + encodeURIComponent(pick.value); });
      host.appendChild(pick);
    }
    if (r.findings.length) {
      host.appendChild(el("h3", { text: "Reward-hacking scan: " + (r.flagged ? "flagged" : "not flagged") }));
      host.appendChild(table(["rule", "severity", "where", "evidence"], r.findings.map(function (f) { return [f.rule, f.severity, f.where === "trace" ? "step " + f.step : (f.file || "patch") + (f.line ? ":" + f.line : ""), f.evidence]; }), "findings-table"));
      if (r.judge) host.appendChild(el("p", { cls: "judge", text: "judge (" + r.judge.model + "): " + (r.judge.verdict || "failed: " + r.judge.error) }));
    }
    host.appendChild(el("h3", { text: "Trajectory" }));
    var tHost = el("div", { id: "traj" }), dHost = el("div", { id: "detail", cls: "detail" });
    host.appendChild(el("div", { cls: "split" }, [tHost, dHost]));
    trajectory(tHost, r, function (e) { detail(dHost, e); });
    host.appendChild(el("h3", { text: "Grade" }));
    if (r.cases.length) host.appendChild(table(["case", "suite", "outcome", "failure label"], r.cases.map(function (c) { return [c.id, c.suite, c.outcome, c.label || ""]; }), "cases-table"));
    else host.appendChild(el("p", { text: r.grade_note }));
    var killed = r.cases.filter(function (c) { return c.killed; });
    if (killed.length) {
      var kHost = el("div", { id: "killed" });
      kHost.appendChild(el("h3", { text: "Killed by the launcher (" + killed.length + "): where each rank was" }));
      killed.forEach(function (c) {
        kHost.appendChild(el("h4", { text: c.id + " — " + c.killed.reason }));
        kHost.appendChild(el("p", { cls: "killed-msg", text: c.killed.message }));
        c.killed.stacks.forEach(function (s) {
          kHost.appendChild(el("details", { cls: "stacks" }, [el("summary", { text: "rank " + s.rank + ": Python stacks (every thread) before the kill" }), el("pre", { text: s.text })]));
        });
      });
      host.appendChild(kHost);
    }
    if (r.tamper_evidence.length) host.appendChild(el("pre", { text: "tamper evidence:\n" + r.tamper_evidence.join("\n") }));
    host.appendChild(el("h3", { text: "Patch" }));
    var pHost = el("div", { id: "patch" });
    host.appendChild(pHost);
    diff(pHost, r.patch);
    host.scrollIntoView();
  }

  function showPair(a, b) {
    var host = $("run");
    host.textContent = "";
    host.hidden = false;
    var ra = byId(a), rb = byId(b);
    if (!ra || !rb) return;
    host.appendChild(el("h2", { text: "Paired view: " + ra.task_id }));
    var cols = el("div", { cls: "pair" });
    [ra, rb].forEach(function (r, k) {
      var col = el("div", { cls: "pair-col", id: "pair-" + k });
      col.appendChild(runHeader(r));
      var t = el("div"), d = el("div", { cls: "detail small" });
      col.appendChild(t); col.appendChild(d);
      trajectory(t, r, function (e) { detail(d, e); });
      cols.appendChild(col);
    });
    host.appendChild(cols);
    var ids = uniq(ra.cases.map(function (c) { return c.id; }).concat(rb.cases.map(function (c) { return c.id; })));
    var of = function (r, id) { for (var i = 0; i < r.cases.length; i++) if (r.cases[i].id === id) return r.cases[i].outcome + (r.cases[i].label ? " (" + r.cases[i].label + ")" : ""); return "–"; };
    host.appendChild(el("h3", { text: "Cases side by side" }));
    host.appendChild(table(["case", ra.run_id, rb.run_id], ids.map(function (id) { return [id, of(ra, id), of(rb, id)]; }), "pair-cases"));
  }

  function route() {
    var h = decodeURIComponent(location.hash.slice(1));
    if (h.indexOf("run=") === 0) showRun(h.slice(4));
    else if (h.indexOf("pair=") === 0) { var p = h.slice(5).split(","); showPair(p[0], p[1]); }
    else $("run").hidden = true;
  }
  window.addEventListener("hashchange", route);
  drawRuns();
  route();
  document.body.setAttribute("data-ready", "1");
})();
`;
