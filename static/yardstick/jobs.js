// Jobs page: each row's status, phase, progress, reward sparkline, cost, IPD and Stop/Resume follow the
// "jobs" and "costs" events; the Start form shows the fields of what is picked (the built-in trainer or a
// recipe), and a preset fills the built-in trainer's.
(function () {
  "use strict";
  const Y = window.Yardstick;
  if (!Y || Y.page !== "jobs") return;
  Y.resumeTopics = "jobs,costs";

  function rowOf(id) { return document.querySelector('tr[data-job="' + id + '"]'); }

  // After a (re)connect: every job's status as the API has it now.
  Y.onCatchUp(async function () {
    const resp = await fetch("/api/jobs", { cache: "no-store" });
    if (!resp.ok) return;
    (await resp.json()).jobs.forEach(function (j) { Y.run({ topic: "jobs", kind: "status", data: j }); });
  });

  Y.on("progress", function (ev) {
    const d = ev.data;
    const row = rowOf(d.id);
    if (!row) return;
    const prog = row.querySelector("progress");
    if (prog && d.steps) { prog.max = d.steps; prog.value = d.step; }
    const t = row.querySelector(".progress-text");
    if (t) t.textContent = d.steps ? d.step + " / " + d.steps : "step " + d.step; // an external run has no step count
    const spark = row.querySelector(".job-spark");
    if (spark && d.reward_mean !== null && d.reward_mean !== undefined) sparkAdd(spark, d.step, Number(d.reward_mean));
  });
  Y.on("costs", function (ev) {
    (ev.data.jobs || []).forEach(function (j) {
      const row = rowOf(j.id);
      if (!row) return;
      Y.shown(row.querySelector(".job-cost"), j.cost_display, j.cost_title);
      const cell = row.querySelector(".job-ipd");
      if (!cell) return;
      if (j.points_per_usd !== null) { Y.shown(cell, j.ipd_display + " pts/$ ", j.ipd_title); return; }
      const span = document.createElement("span");
      span.className = "muted"; span.title = j.state; span.textContent = j.state;
      cell.replaceChildren(span);
    });
  });
  Y.on("status", function (ev) {
    const d = ev.data;
    const row = rowOf(d.id);
    if (!row) return;
    row.querySelector(".job-status").innerHTML = Y.badge(d.status);
    if (d.phase !== undefined) phase(ev);
    const prog = row.querySelector("progress");
    if (prog && d.steps) { prog.max = d.steps; prog.value = d.steps_done; }
    const t = row.querySelector(".progress-text");
    if (t && d.steps) t.textContent = d.steps_done + " / " + d.steps;
    else if (t && d.steps === 0 && d.steps_done !== undefined) t.textContent = "step " + d.steps_done;
    Y.showControls(row, d);
  });
  // The line moved (trainer/queue.py): each moved job's note (what it waits for, its place), then the queue panel as
  // the server renders it now. A status change moves the line too (an ended job frees its devices).
  Y.on("queue", function (ev) {
    (ev.data.jobs || []).forEach(function (j) {
      const row = rowOf(j.id);
      if (!row) return;
      const note = row.querySelector(".status-note");
      if (note) { note.textContent = j.note || ""; note.title = j.note || ""; note.hidden = !j.note; }
      const waited = row.querySelector(".waited");
      if (waited && !j.in_line) waited.remove();
    });
    refreshPanel();
  });
  Y.on("status", function () { refreshPanel(); });
  let panelTimer = null;
  function refreshPanel() {
    if (panelTimer) return;
    panelTimer = setTimeout(async function () {
      panelTimer = null;
      const panel = document.getElementById("queue");
      if (!panel) return;
      const resp = await fetch("/jobs/queue", { cache: "no-store" });
      if (!resp.ok) return;
      const box = document.createElement("div");
      box.innerHTML = await resp.text();
      const fresh = box.querySelector("#queue");
      if (fresh) {
        // A half-typed cap stays as it was.
        const form = panel.querySelector("#cap-form");
        if (form && fresh.querySelector("#cap-form")) fresh.querySelector("#cap-form").replaceWith(form);
        panel.replaceWith(fresh);
      }
    }, 200);
  }
  // "waiting 2 min" beside a waiting job's note, counted here between events.
  function tickWaits() {
    document.querySelectorAll(".waited[data-since]").forEach(function (el) {
      const s = Math.max(0, (Date.now() - Date.parse(el.dataset.since)) / 1000);
      el.textContent = "waiting " + (s < 60 ? Math.floor(s) + " s" : s < 3600 ? Math.floor(s / 60) + " min"
        : Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min");
    });
  }
  tickWaits();
  setInterval(tickWaits, 1000);

  // What the worker is doing now ("building the base policy ...", "training"); hidden when empty.
  function phase(ev) {
    const d = ev.data;
    const row = rowOf(d.id);
    const el = row && row.querySelector(".job-phase");
    if (!el) return;
    el.textContent = d.phase || "";
    el.hidden = !d.phase;
  }
  Y.on("phase", phase);

  // A row's reward sparkline grows a point a step. It holds at most the table's data-spark-max
  // points: every stride-th step and the newest; past the limit the stride doubles (as the server's
  // downsampling does for the whole run). Drawn as dashboard.figures.sparkline draws it.
  function sparkAdd(cell, step, value) {
    const max = Number(cell.closest("table").dataset.sparkMax) || 40;
    let pts = JSON.parse(cell.dataset.points || "[]").filter(function (p) { return p[0] < step; });
    let stride = Number(cell.dataset.stride) ||
      Math.max(1, Math.ceil((pts.length ? pts[pts.length - 1][0] : step) / max));
    if (pts.length && pts[pts.length - 1][0] % stride !== 0) pts.pop(); // the previous newest, off the stride
    pts.push([step, value]);
    while (pts.length > max) {
      stride *= 2;
      pts = pts.filter(function (p, i) { return p[0] % stride === 0 || i === pts.length - 1; });
    }
    cell.dataset.points = JSON.stringify(pts);
    cell.dataset.stride = stride;
    sparkDraw(cell, pts);
  }
  const SVG_NS = "http://www.w3.org/2000/svg";
  function sparkDraw(cell, pts) {
    const good = pts.filter(function (p) { return p[1] !== null && isFinite(p[1]); });
    if (good.length < 2) return;
    const width = 120, height = 28;
    let svg = cell.querySelector("svg.spark");
    if (!svg) {
      svg = document.createElementNS(SVG_NS, "svg");
      Object.entries({ class: "spark", viewBox: "0 0 120 28", width: width, height: height, role: "img" })
        .forEach(function ([k, v]) { svg.setAttribute(k, v); });
      const line = document.createElementNS(SVG_NS, "polyline");
      Object.entries({ fill: "none", stroke: "#0072B2", "stroke-width": "1.5" })
        .forEach(function ([k, v]) { line.setAttribute(k, v); });
      svg.append(line);
      cell.replaceChildren(svg);
    }
    const ys = good.map(function (p) { return p[1]; });
    const lo = Math.min.apply(null, ys), hi = Math.max.apply(null, ys), span = (hi - lo) || 1;
    const first = good[0][0], run = (good[good.length - 1][0] - first) || 1;
    svg.querySelector("polyline").setAttribute("points", good.map(function (p) {
      return ((p[0] - first) / run * (width - 2) + 1).toFixed(1) + "," + (height - 2 - (p[1] - lo) / span * (height - 4)).toFixed(1);
    }).join(" "));
    svg.setAttribute("aria-label", "reward trend, latest " + Y.num(good[good.length - 1][1], 3));
  }

  // -- the Start form: what to run shows its own fields; a preset fills the built-in trainer's --------------
  // Only the fieldset of what is picked is enabled: a disabled one posts nothing, so one recipe's
  // "params.<name>" never meets another's.
  const whatSel = document.getElementById("f-what");
  if (whatSel) {
    const pick = function () {
      const builtin = whatSel.value === "builtin";
      document.querySelectorAll("fieldset.what-fields").forEach(function (fs) {
        const mine = fs.dataset.what === whatSel.value;
        fs.disabled = !mine;
        fs.hidden = !mine;
      });
      // A recipe's job is named after it unless given a name; the built-in trainer's needs one.
      document.querySelectorAll("[data-for-what]").forEach(function (el) {
        el.hidden = (el.dataset.forWhat === "builtin") !== builtin;
      });
      const name = document.getElementById("f-name");
      if (name) { name.required = builtin; name.setAttribute("aria-required", builtin ? "true" : "false"); }
    };
    whatSel.addEventListener("change", pick);
    pick();
  }

  // -- a preset fills the built-in trainer's fields ------------------------------------------------
  const presetsEl = document.getElementById("presets");
  const presetSel = document.getElementById("f-preset");
  if (presetsEl && presetSel) {
    const presets = JSON.parse(presetsEl.textContent);
    presetSel.addEventListener("change", function () {
      const p = presets[presetSel.value];
      if (!p) return;
      const env = document.getElementById("f-env");
      if (env) env.value = p.env;
      Object.keys(p.config).forEach(function (k) {
        const input = document.getElementById("f-" + k);
        if (input) input.value = p.config[k];
      });
    });
  }
})();
