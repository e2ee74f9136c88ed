"""The report's stylesheet and script, inlined into every page so it works offline.

Kept as Python strings (not data files) so a wheel always ships them with the code.
"""

CSS = """
:root{--env:#fff3c4;--model:#d9ecff;--prompt:#eceff3;--think:#ede9fe;--ink:#1f2937;--mute:#6b7280}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;color:var(--ink);margin:0;
  background:#f8fafc}
main{max-width:1280px;margin:0 auto;padding:1em 1.5em 3em}
h1{font-size:1.4em;margin:.4em 0}h2{font-size:1.15em;margin:1.6em 0 .5em}
code,pre,.conv{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
.muted{color:var(--mute)}
.cards{display:flex;flex-wrap:wrap;gap:.8em}
.card{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:.6em 1em;min-width:11em}
.card b{display:block;font-size:1.35em}.card span{color:var(--mute);font-size:.9em}
table{border-collapse:collapse;background:#fff;margin:.3em 0}
th,td{border:1px solid #e5e7eb;padding:3px 9px;text-align:left;vertical-align:top}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(420px,1fr));gap:.8em}
svg.chart{background:#fff;border:1px solid #e5e7eb;border-radius:8px;width:100%;height:auto}
svg .title{font-weight:600;font-size:13px;text-anchor:middle}
svg .xtick{font-size:11px;text-anchor:middle;fill:#374151}
svg .ytick{font-size:11px;text-anchor:end;fill:#374151}
svg .xlabel,svg .ylabel{font-size:11px;text-anchor:middle;fill:var(--mute)}
svg .legend{font-size:11px}svg .empty{font-size:12px;text-anchor:middle;fill:var(--mute)}
svg .grid{stroke:#eef0f3}svg .axis,svg .tick{stroke:#9ca3af}
svg .line{fill:none;stroke-width:2}svg .band{opacity:.15;stroke:none}
svg .bar{fill:#2563eb;opacity:.8}svg .zero{stroke:#9ca3af;stroke-dasharray:4 3}
svg .whisker{stroke:#2563eb;stroke-width:2}svg .pt{opacity:.45}
#controls{display:flex;flex-wrap:wrap;gap:.6em 1.2em;align-items:center;background:#fff;
  border:1px solid #e5e7eb;border-radius:8px;padding:.6em .9em;position:sticky;top:0;z-index:2}
#controls label{white-space:nowrap}#controls input[type=number]{width:6em}
.pager{display:flex;gap:.6em;align-items:center;margin:.6em 0}
.ep{background:#fff;border:1px solid #e5e7eb;border-radius:8px;margin:.7em 0}
.ep>summary{cursor:pointer;padding:.45em .8em;display:flex;flex-wrap:wrap;gap:.3em 1em}
.ep[open]>summary{border-bottom:1px solid #e5e7eb}
.tag{border-radius:4px;padding:0 .45em;background:#f3f4f6}
.st-error .tag.st,.st-timeout .tag.st{background:#fee2e2;color:#991b1b}
.st-done .tag.st{background:#dcfce7;color:#166534}
.tag.won{background:#dcfce7;color:#166534}.tag.lost{background:#fef3c7;color:#92400e}
.tag.held{background:#e0e7ff;color:#3730a3}
tr.sub td:first-child{padding-left:2em;color:#374151;white-space:nowrap}
.err{color:#991b1b;background:#fef2f2;padding:.3em .8em;white-space:pre-wrap}
.conv{white-space:pre-wrap;word-break:break-word;padding:.6em .8em;margin:0}
.seg-prompt{background:var(--prompt)}.seg-env{background:var(--env)}
.seg-model{background:var(--model)}
details.think{display:inline;background:var(--think)}
details.think>summary{display:inline;cursor:pointer;color:#5b21b6;font-style:italic}
details.think[open]{display:inline}
.msg{padding:.3em .8em}.msg>.role{font-weight:600;font-size:.85em;color:var(--mute)}
.msg.model{background:var(--model)}.msg.env{background:var(--env)}.msg.prompt{background:var(--prompt)}
.key span{padding:0 .5em;margin-right:.4em;border-radius:3px}.key .think{background:var(--think)}
#js-errors{color:#991b1b;white-space:pre-wrap}
"""

JS = r"""
(function () {
  "use strict";
  var errorBox = document.getElementById("js-errors");
  window.addEventListener("error", function (e) {
    errorBox.hidden = false;
    errorBox.textContent += "Script error: " + e.message + "\n";
  });
  var started = performance.now();
  var data = JSON.parse(document.getElementById("episodes-data").textContent);
  var eps = data.episodes;
  var $ = function (id) { return document.getElementById(id); };
  var state = {status: new Set(data.statuses), env: "", split: "", min: "", max: "", q: "",
               sort: "file", size: 25, page: 1};
  var matching = eps;

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function fmt(x) { return x === null ? "n/a" : (Math.round(x * 1e4) / 1e4).toString(); }

  // Model text: <think>...</think> folds into a closed <details>; the tags stay in it, so the
  // text shown when unfolded is exactly what the model wrote. A segment that closes a think
  // block it did not open continues one opened by the prompt.
  function addModel(parent, text) {
    var open = text.indexOf("</think>") >= 0 &&
      (text.indexOf("<think>") < 0 || text.indexOf("</think>") < text.indexOf("<think>"));
    var parts = text.split(/(<think>|<\/think>)/);
    var plain = "", think = "";
    function flushPlain() {
      if (plain) parent.appendChild(el("span", "seg-model", plain));
      plain = "";
    }
    function flushThink() {
      if (!think) return;
      var box = el("details", "think");
      var body = think.replace(/<\/?think>/g, "").trim();
      box.appendChild(el("summary", "", body ? "reasoning (" + body.length + " chars)"
                                             : "reasoning (empty)"));
      box.appendChild(el("span", "seg-model", think));
      parent.appendChild(box);
      think = "";
    }
    parts.forEach(function (part) {
      if (part === "<think>") { flushPlain(); open = true; think += part; return; }
      if (part === "</think>") { think += part; flushThink(); open = false; return; }
      if (open) think += part; else plain += part;
    });
    flushThink();
    flushPlain();
  }

  function conversation(ep) {
    var box = el("div", "conv");
    if (ep.seg) {
      ep.seg.forEach(function (s) {
        if (s[1] === "model") addModel(box, s[0]);
        else box.appendChild(el("span", s[1] === "env" ? "seg-env" : "seg-prompt", s[0]));
      });
    } else if (ep.msg) {
      box.className = "";
      ep.msg.forEach(function (m) {
        var who = m.role === "assistant" ? "model" : (m.role === "system" ? "prompt" : "env");
        var row = el("div", "msg " + who);
        row.appendChild(el("div", "role", m.role));
        var content = el("div", "conv");
        if (who === "model") addModel(content, String(m.content));
        else content.textContent = m.content;
        row.appendChild(content);
        box.appendChild(row);
      });
    } else {
      box.textContent = ep.txt || "(no text recorded)";
    }
    return box;
  }

  function card(ep) {
    var box = el("details", "ep st-" + ep.s);
    box.open = true;
    var head = el("summary");
    head.appendChild(el("b", "", "#" + ep.i));
    head.appendChild(el("span", "", "seed " + ep.seed));
    head.appendChild(el("span", "tag", "reward " + fmt(ep.r)));
    head.appendChild(el("span", "tag st", ep.s));
    if (ep.t !== null) head.appendChild(el("span", "", ep.t + " turns"));
    if (ep.e) head.appendChild(el("span", "", "env " + ep.e));
    if (ep.g !== null && ep.g !== undefined) head.appendChild(el("span", "", "stage " + ep.g));
    if (ep.ok === true || ep.ok === false) {
      head.appendChild(el("span", "tag " + (ep.ok ? "won" : "lost"),
                          ep.ok ? "success" : "no success"));
    }
    if (ep.sp === "eval") head.appendChild(el("span", "tag held", "held-out"));
    if (ep.k !== null) {
      head.appendChild(el("span", "", (ep.sp === "eval" ? "after step " : "step ") + ep.k));
    }
    if (ep.tok) head.appendChild(el("span", "muted", ep.tok[0] + " model / " + ep.tok[1] +
                                    " env tokens"));
    box.appendChild(head);
    if (ep.err) box.appendChild(el("div", "err", ep.err));
    box.appendChild(conversation(ep));
    return box;
  }

  function haystack(ep) {
    if (ep._h === undefined) {
      var text = ep.seg ? ep.seg.map(function (s) { return s[0]; }).join("")
        : ep.msg ? ep.msg.map(function (m) { return m.content; }).join("\n") : (ep.txt || "");
      ep._h = (ep.seed + "\n" + ep.err + "\n" + text).toLowerCase();
    }
    return ep._h;
  }

  function filter() {
    var lo = state.min === "" ? -Infinity : Number(state.min);
    var hi = state.max === "" ? Infinity : Number(state.max);
    var bounded = state.min !== "" || state.max !== "";
    var q = state.q.toLowerCase();
    matching = eps.filter(function (ep) {
      if (!state.status.has(ep.s)) return false;
      if (state.env && ep.e !== state.env) return false;
      if (state.split && ep.sp !== state.split) return false;
      if (bounded && (ep.r === null || ep.r < lo || ep.r > hi)) return false;
      return !q || haystack(ep).indexOf(q) >= 0;
    });
    var key = {reward_desc: function (a, b) { return (b.r ?? -Infinity) - (a.r ?? -Infinity); },
               reward_asc: function (a, b) { return (a.r ?? Infinity) - (b.r ?? Infinity); },
               turns_desc: function (a, b) { return (b.t ?? -1) - (a.t ?? -1); }}[state.sort];
    if (key) matching = matching.slice().sort(function (a, b) { return key(a, b) || a.i - b.i; });
  }

  function render() {
    var pages = Math.max(1, Math.ceil(matching.length / state.size));
    state.page = Math.min(Math.max(1, state.page), pages);
    var first = (state.page - 1) * state.size;
    var shown = matching.slice(first, first + state.size);
    var list = $("episodes");
    list.textContent = "";
    var frag = document.createDocumentFragment();
    shown.forEach(function (ep) { frag.appendChild(card(ep)); });
    list.appendChild(frag);
    var text = matching.length ? "episodes " + (first + 1) + "-" + (first + shown.length) +
      " of " + matching.length + " matching (" + eps.length + " in all)"
      : "no episode matches (" + eps.length + " in all)";
    document.querySelectorAll(".pageinfo").forEach(function (n) {
      n.textContent = "page " + state.page + " of " + pages + ": " + text;
    });
    document.querySelectorAll(".prev").forEach(function (b) { b.disabled = state.page <= 1; });
    document.querySelectorAll(".next").forEach(function (b) { b.disabled = state.page >= pages; });
    writeHash();
  }

  function update() { filter(); state.page = 1; render(); }

  function writeHash() {
    var p = new URLSearchParams();
    if (state.status.size !== data.statuses.length) {
      p.set("status", Array.from(state.status).join(","));
    }
    ["env", "split", "min", "max", "q"].forEach(function (k) {
      if (state[k] !== "") p.set(k, state[k]);
    });
    if (state.sort !== "file") p.set("sort", state.sort);
    if (state.size !== 25) p.set("size", state.size);
    if (state.page > 1) p.set("page", state.page);
    var hash = p.toString();
    if (hash !== location.hash.slice(1)) history.replaceState(null, "", hash ? "#" + hash : " ");
  }

  function readHash() {
    var p = new URLSearchParams(location.hash.slice(1));
    if (p.has("status")) state.status = new Set(p.get("status").split(",").filter(Boolean));
    ["env", "split", "min", "max", "q", "sort"].forEach(function (k) {
      if (p.has(k)) state[k] = p.get(k);
    });
    if (p.has("size")) state.size = Math.max(1, parseInt(p.get("size"), 10) || 25);
    if (p.has("page")) state.page = parseInt(p.get("page"), 10) || 1;
  }

  function controls() {
    var box = $("status-filter");
    data.statuses.forEach(function (s) {
      var label = el("label");
      var check = el("input");
      check.type = "checkbox";
      check.value = s;
      check.checked = state.status.has(s);
      check.addEventListener("change", function () {
        if (check.checked) state.status.add(s); else state.status.delete(s);
        update();
      });
      label.appendChild(check);
      label.appendChild(document.createTextNode(" " + s + " (" + data.status_counts[s] + ")"));
      box.appendChild(label);
    });
    var envs = $("env-filter");
    if (data.envs.length > 1) {
      data.envs.forEach(function (e) {
        var option = el("option", "", e);
        option.value = e;
        envs.appendChild(option);
      });
      envs.value = state.env;
      envs.addEventListener("change", function () { state.env = envs.value; update(); });
    } else {
      envs.parentNode.hidden = true;
    }
    var splits = $("split-filter");
    if ((data.splits || []).length > 1) {
      splits.value = state.split;
      splits.addEventListener("change", function () { state.split = splits.value; update(); });
    } else {
      splits.parentNode.hidden = true;
    }
    var timer = null;
    [["min-reward", "min"], ["max-reward", "max"], ["search", "q"]].forEach(function (pair) {
      var input = $(pair[0]);
      input.value = state[pair[1]];
      input.addEventListener("input", function () {
        clearTimeout(timer);
        timer = setTimeout(function () { state[pair[1]] = input.value.trim(); update(); }, 150);
      });
    });
    $("sort").value = state.sort;
    $("sort").addEventListener("change", function () { state.sort = $("sort").value; update(); });
    $("size").value = String(state.size);
    $("size").addEventListener("change", function () {
      state.size = Number($("size").value);
      update();
    });
    document.querySelectorAll(".prev").forEach(function (b) {
      b.addEventListener("click", function () { state.page -= 1; render(); });
    });
    document.querySelectorAll(".next").forEach(function (b) {
      b.addEventListener("click", function () { state.page += 1; render(); });
    });
    $("fold").addEventListener("click", function () {
      var cards = document.querySelectorAll("#episodes > details.ep");
      var anyOpen = Array.prototype.some.call(cards, function (c) { return c.open; });
      cards.forEach(function (c) { c.open = !anyOpen; });
    });
  }

  readHash();
  controls();
  filter();
  render();
  document.body.dataset.renderMs = Math.round(performance.now() - started);
  document.body.dataset.ready = "1";
})();
"""
