// Yardstick pages: draw the figures built in Python, and keep them live over the WebSocket.
//
// The page's root element (.page) says which page it is (data-page) and which live
// topics it follows (data-topics, empty when paused or not live). Figures come from
// <script id="figures">; a figure with a `live` spec grows with Plotly.extendTraces.
// Events, by kind: step and rewind (a job's charts), progress (a Jobs row's bar and sparkline),
// status, costs (cost and IPD figures after each attribution run), samples (telemetry and the
// fleet cards).
(function () {
  "use strict";
  const root = document.querySelector(".page");
  if (!root) return;
  const page = root.dataset.page;
  const figs = {};
  window.__yardstickLoadedAt = window.__yardstickLoadedAt || Date.now(); // tests check the page never reloads

  // -- figures ---------------------------------------------------------------------------
  const figuresEl = document.getElementById("figures");
  const specs = figuresEl ? JSON.parse(figuresEl.textContent) : {};
  const config = { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
  document.querySelectorAll(".chart[data-fig]").forEach(function (el) {
    const spec = specs[el.dataset.fig];
    if (!spec || !window.Plotly) return;
    const f = { el: el, live: spec.live || null, spec: spec };
    figs[el.dataset.fig] = f;
    if (spec.empty) sayEmpty(f); else draw(f);
  });
  function draw(f) {
    f.el.replaceChildren();
    Plotly.newPlot(f.el, f.spec.data, f.spec.layout, config);
    f.el.dataset.drawn = "true";
    f.drawn = true;
  }
  // A chart with nothing to draw yet says why in words, not on bare axes: the job's phase while it has one
  // ("building the base policy ..."), else the figure's `empty` text. Its first point draws it (flush).
  function sayEmpty(f) {
    const phase = document.getElementById("job-phase");
    const now = f.live && phase && !phase.hidden && phase.textContent.trim();
    const title = document.createElement("h3");
    title.textContent = (f.spec.layout.title || {}).text || "";
    const p = document.createElement("p");
    p.textContent = now ? now.charAt(0).toUpperCase() + now.slice(1) + "…" : f.spec.empty;
    const box = document.createElement("div");
    box.className = "chart-empty"; box.setAttribute("role", "status");
    box.append(title, p);
    f.el.replaceChildren(box);
    f.el.dataset.drawn = "empty";
  }

  function xValue(v) {
    if (typeof v === "number") return v;
    const t = Date.parse(v);
    return isNaN(t) ? v : t;
  }
  function lastX(el, trace) {
    const xs = el.data && el.data[trace] && el.data[trace].x;
    return xs && xs.length ? xValue(xs[xs.length - 1]) : null;
  }
  function metric(expr, m) {
    const get = function (k) { const v = m[k]; return v === undefined || v === null ? null : Number(v); };
    if (expr.key) return get(expr.key);
    if (expr.rest) {  // [total, [parts]]: what the parts leave of the total (figures.job_figures' "other")
      const total = get(expr.rest[0]);
      if (total === null) return null;
      const parts = expr.rest[1].map(get).filter(function (v) { return v !== null; });
      return Math.max(0, total - parts.reduce(function (s, v) { return s + v; }, 0));
    }
    const [a, b] = (expr.sum || expr.diff || expr.ratio).map(get);
    if (a === null || b === null) return null;
    if (expr.sum) return a + b;
    if (expr.diff) return a - b;
    return b === 0 ? null : a / b;
  }
  // Append one point per trace of every live figure; `pick(traceSpec)` gives [x, y] or null to skip.
  // Points are queued and drawn together at most once every FLUSH_MS (an isolated point at once):
  // a fast run sends several steps a second, and redrawing every chart for each would starve the browser.
  const FLUSH_MS = 400;
  let pending = new Map(), flushTimer = null, lastFlush = 0;
  function extend(pick) {
    Object.entries(figs).forEach(function ([key, f]) {
      if (!f.live) return;
      f.live.traces.forEach(function (t) {
        const p = pick(t, f.live);
        if (!p || (p[1] === null && t.skip_null)) return;
        const q = pending.get(key) || new Map();
        pending.set(key, q);
        const pts = q.get(t.trace) || { x: [], y: [] };
        q.set(t.trace, pts);
        const prev = pts.x.length ? xValue(pts.x[pts.x.length - 1]) : lastX(f.el, t.trace);
        if (prev !== null && xValue(p[0]) <= prev) return; // already drawn (the page was rendered with it)
        pts.x.push(p[0]); pts.y.push(p[1]);
      });
    });
    if (!flushTimer) flushTimer = setTimeout(flush, Math.max(0, lastFlush + FLUSH_MS - Date.now()));
  }
  function flush() {
    flushTimer = null;
    lastFlush = Date.now();
    const batch = pending;
    pending = new Map();
    batch.forEach(function (q, key) {
      const xs = [], ys = [], idx = [];
      q.forEach(function (pts, trace) { if (pts.x.length) { xs.push(pts.x); ys.push(pts.y); idx.push(trace); } });
      if (!idx.length) return;
      const f = figs[key], el = f.el;
      if (!f.drawn) {
        // Still nothing to draw (the baseline step has only an eval): keep saying why.
        if (ys.every(function (y) { return y.every(function (v) { return v === null; }); })) return;
        draw(f);
      }
      if (el.layout.annotations && el.layout.annotations.length) Plotly.relayout(el, { annotations: [] }); // "no data yet"
      Plotly.extendTraces(el, { x: xs, y: ys }, idx);
    });
  }

  // -- live state: the toggle, the indicator, the socket with back-off ----------------------
  const stateEl = document.getElementById("live-state");
  const toggle = document.getElementById("live-toggle");
  const topics = root.dataset.topics || "";
  let socket = null, retry = 0, timer = null, wanted = !!topics;
  let fallbackTopics = topics;
  if (!fallbackTopics) {
    // Paused on load: what to follow when the user turns live on.
    if (page === "job") fallbackTopics = "job." + root.dataset.job + ",jobs,costs";
    else if (page === "jobs") fallbackTopics = "jobs,costs";
    else if (page === "fleet") fallbackTopics = "fleet,costs";
    else if (page === "node") fallbackTopics = root.dataset.liveTopic || "";
    else if (page === "campaign") fallbackTopics = "campaign." + root.dataset.campaign + ",jobs,costs";
  }
  function setState(state, text) {
    if (!stateEl) return;
    stateEl.dataset.state = state;
    stateEl.textContent = text || state;
  }
  function connect() {
    if (!fallbackTopics) return;
    clearTimeout(timer);
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    setState(retry ? "reconnecting" : "connecting");
    socket = new WebSocket(scheme + location.host + "/ws/live?topics=" + encodeURIComponent(fallbackTopics));
    socket.onopen = function () { retry = 0; setState("live"); };
    socket.onmessage = function (msg) {
      let ev;
      try { ev = JSON.parse(msg.data); } catch (e) { return; }
      handle(ev);
    };
    socket.onclose = function (ev) {
      socket = null;
      if (!wanted) return;
      if (ev.code === 4401 || ev.code === 4403) { setState("denied", "not allowed: log in again"); return; }
      // Back-off: 1, 2, 4 ... 30 s, with jitter so a restarted server is not hit by every tab at once.
      const delay = Math.min(30000, 1000 * Math.pow(2, retry)) * (0.75 + Math.random() * 0.5);
      retry += 1;
      setState("reconnecting", "reconnecting in " + Math.round(delay / 1000) + " s");
      timer = setTimeout(connect, delay);
    };
  }
  function setLive(on) {
    wanted = on;
    if (toggle) toggle.setAttribute("aria-pressed", on ? "true" : "false");
    const url = new URL(location.href);
    if (on) url.searchParams.delete("live"); else url.searchParams.set("live", "0");
    history.replaceState(null, "", url);
    if (on) connect();
    else { clearTimeout(timer); if (socket) socket.close(); setState("paused"); }
  }
  if (toggle) toggle.addEventListener("click", function () { setLive(!wanted); });
  if (wanted) connect();

  // -- events --------------------------------------------------------------------------------
  // On every (re)connect, catch up on what happened while the socket was not listening
  // (between the page's render and the subscription, or during a reconnect).
  async function catchUp() {
    try {
      if (page === "job") {
        const id = root.dataset.job;
        let after = root.dataset.lastStep === "" ? -1 : Number(root.dataset.lastStep);
        for (;;) {
          const resp = await fetch("/api/jobs/" + id + "/steps?after=" + after, { cache: "no-store" });
          if (!resp.ok) break;
          const body = await resp.json();
          if (after >= 0 && body.steps_done < after) {
            // Resumed from an earlier checkpoint while we were not listening: its steps run again.
            handlers.rewind({ topic: "job." + id, kind: "rewind", data: { job: Number(id), through: body.steps_done } });
            after = body.steps_done;
            continue;
          }
          body.steps.forEach(function (s) { handlers.step({ topic: "job." + id, kind: "step", data: { step: s.step, metrics: s.metrics } }); });
          handlers.status({ topic: "jobs", kind: "status", data: { id: Number(id), status: body.status, phase: body.phase, steps_done: body.steps_done, can_stop: body.can_stop, can_resume: body.can_resume } });
          if (!body.steps.length || body.next_after === after) break;
          after = body.next_after;
        }
      } else if (page === "jobs") {
        const resp = await fetch("/api/jobs", { cache: "no-store" });
        if (!resp.ok) return;
        (await resp.json()).jobs.forEach(function (j) { handlers.status({ topic: "jobs", kind: "status", data: j }); });
      }
    } catch (err) { /* the next reconnect tries again */ }
  }

  const handlers = {
    subscribed: function () { catchUp(); },
    step: function (ev) {
      if (page !== "job" || ev.topic !== "job." + root.dataset.job) return;
      const d = ev.data, m = d.metrics || {};
      if (root.dataset.lastStep !== "" && d.step <= Number(root.dataset.lastStep)) return; // already shown
      loggedKeys(m);
      extend(function (t) { return [d.step, metric(t.y, m)]; });
      root.dataset.lastStep = d.step;
      // Steps came, and a chart may still have no value of its own (the baseline is an eval alone).
      Object.values(figs).forEach(function (f) {
        if (!f.live || f.drawn || !f.spec.empty) return;
        f.spec.empty = d.step === 0 ? "No training step yet" : "Nothing to draw yet";
        sayEmpty(f);
      });
      text("steps-done", d.step);
      const prog = document.getElementById("job-progress");
      if (prog) prog.value = d.step;
      if (m["train/reward_mean"] != null) text("reward-now", Number(m["train/reward_mean"]).toFixed(3));
      if (m["eval/pass1"] != null) text("pass1-now", Number(m["eval/pass1"]).toFixed(1));
      if (d.step === 0 && m["eval/pass1"] != null) text("baseline-pass1", num(m["eval/pass1"], 1));
      if (d.samples && d.samples.length) showSamples(d.step, d.samples);
    },
    // An external run's generations (tracking/artifacts.py): the samples table follows the newest step.
    rollouts: function (ev) {
      if (page === "job" && ev.topic === "job." + root.dataset.job) showSamples(ev.data.step, ev.data.samples);
    },
    // Where the job runs: its stints, as Stint.to_dict gives them (the runner opens one; a status event ends it).
    stints: function (ev) {
      if (page === "job" && ev.topic === "job." + root.dataset.job) showStints(ev.data.stints);
    },
    rewind: function (ev) {
      if (page !== "job" || ev.topic !== "job." + root.dataset.job) return;
      rewindTo(Number(ev.data.through));
    },
    progress: function (ev) {
      if (page !== "jobs") return;
      const d = ev.data;
      const row = document.querySelector('tr[data-job="' + d.id + '"]');
      if (!row) return;
      const prog = row.querySelector("progress");
      if (prog && d.steps) { prog.max = d.steps; prog.value = d.step; }
      const t = row.querySelector(".progress-text");
      if (t) t.textContent = d.steps ? d.step + " / " + d.steps : "step " + d.step; // an external run has no step count
      const spark = row.querySelector(".job-spark");
      if (spark && d.reward_mean !== null && d.reward_mean !== undefined) sparkAdd(spark, d.step, Number(d.reward_mean));
    },
    costs: function (ev) {
      const d = ev.data;
      if (page === "fleet" && d.fleet) fleetCosts(d.fleet);
      (d.jobs || []).forEach(function (j) {
        if (page === "jobs") {
          const row = document.querySelector('tr[data-job="' + j.id + '"]');
          if (!row) return;
          shown(row.querySelector(".job-cost"), j.cost_display, j.cost_title);
          const cell = row.querySelector(".job-ipd");
          if (!cell) return;
          if (j.points_per_usd !== null) { shown(cell, j.ipd_display + " pts/$ ", j.ipd_title); return; }
          const span = document.createElement("span");
          span.className = "muted"; span.title = j.state; span.textContent = j.state;
          cell.replaceChildren(span);
        } else if (page === "job" && String(j.id) === root.dataset.job) {
          shown(document.getElementById("job-cost"), j.cost_display, j.cost_title);
          withUnit(document.getElementById("job-ipd"), j.points_per_usd === null ? null : j.ipd_display, "pts/$");
          text("job-ipd-hint", j.usd_per_point ? j.usd_per_point_display + " per point" : j.state);
          if (j.usd_per_million_tokens !== undefined) {
            text("job-usd-per-mtok", j.usd_per_million_tokens_display);
            text("job-tokens-hint", j.tokens_per_joule ? num(j.tokens_per_joule, 2) + " tokens/J" : j.tokens_state);
          }
          if (j.cost_curve) costCurve(j.cost_curve);
          if (j.base_build_text !== undefined) text("job-base-build", j.base_build_text);
        }
      });
    },
    status: function (ev) {
      const d = ev.data;
      if (page === "job" && String(d.id) === root.dataset.job) {
        const box = document.getElementById("job-status");
        if (box) box.innerHTML = badge(d.status);
        showControls(document, d);
        if (d.phase !== undefined) handlers.phase(ev);
        if (d.change) addHistory(d.change);
        if (d.stints) showStints(d.stints);
        // A message announced a status ("Job 3 is stopping."): once the job has another, it is no longer true.
        document.querySelectorAll(".messages li[data-while-status]").forEach(function (li) {
          if (li.dataset.job === String(d.id) && li.dataset.whileStatus !== d.status) li.remove();
        });
        document.querySelectorAll(".messages").forEach(function (ul) { if (!ul.children.length) ul.remove(); });
      }
      if (page === "jobs") {
        const row = document.querySelector('tr[data-job="' + d.id + '"]');
        if (!row) return;
        row.querySelector(".job-status").innerHTML = badge(d.status);
        if (d.phase !== undefined) handlers.phase(ev);
        const prog = row.querySelector("progress");
        if (prog && d.steps) { prog.max = d.steps; prog.value = d.steps_done; }
        const t = row.querySelector(".progress-text");
        if (t && d.steps) t.textContent = d.steps_done + " / " + d.steps;
        else if (t && d.steps === 0 && d.steps_done !== undefined) t.textContent = "step " + d.steps_done;
        showControls(row, d);
      }
    },
    // What the worker is doing now ("building the base policy ...", "training"); hidden when empty.
    phase: function (ev) {
      const d = ev.data;
      let el = null;
      if (page === "job" && String(d.id) === root.dataset.job) el = document.getElementById("job-phase");
      if (page === "jobs") {
        const row = document.querySelector('tr[data-job="' + d.id + '"]');
        el = row && row.querySelector(".job-phase");
      }
      if (!el) return;
      el.textContent = d.phase || "";
      el.hidden = !d.phase;
      if (page === "job") Object.values(figs).forEach(function (f) { if (f.live && !f.drawn) sayEmpty(f); });
    },
    reading: function (ev) {
      // The server could not read the database (or can again): its socket is open, the data is not.
      if (ev.data.ok) { setState("live"); catchUp(); }
      else setState("reconnecting", "reconnecting: the database is not answering");
    },
    samples: function (ev) {
      const d = ev.data;
      if (page === "fleet") fleetSamples(d);
      if (page === "node") {
        const byUuid = {};
        d.samples.forEach(function (s) { byUuid[s.uuid] = s; });
        extend(function (t) {
          const s = byUuid[t.device];
          return s ? [s.ts, metric(t.y, s)] : null;
        });
      }
    },
  };
  function handle(ev) {
    const h = handlers[ev.kind];
    if (h) h(ev);
    document.dispatchEvent(new CustomEvent("yardstick:event", { detail: ev }));
  }
  function text(id, value) { setText(document.getElementById(id), value); }
  // A figure as the server wrote it (costs.money), its exact value on hover where that rounds.
  function shown(el, value, title) { if (el) { el.textContent = value; el.title = title || ""; } }
  function setText(el, value) { if (el) el.textContent = value; }
  // "12.5 <small>pts/$</small>", or "—" without a figure.
  function withUnit(el, value, unit) {
    if (!el) return;
    if (value === null) { el.textContent = "—"; return; }
    const small = document.createElement("small");
    small.textContent = unit;
    el.replaceChildren(value + " ", small);
  }

  // The template filters `num` and `usd` (dashboard/templatetags): fixed places, thousands separated by commas.
  function num(value, places) {
    if (value === null || value === undefined || value === "") return "—";
    const v = Number(value);
    const [whole, frac] = Math.abs(v).toFixed(places).split(".");
    return (v < 0 ? "-" : "") + whole.replace(/\B(?=(\d{3})+(?!\d))/g, ",") + (frac ? "." + frac : "");
  }
  function usd(value) { return value === null || value === undefined || value === "" ? "—" : "$" + num(value, 2); }
  function hhmm(iso) {
    const t = new Date(iso), pad = function (n) { return String(n).padStart(2, "0"); };
    return pad(t.getUTCHours()) + ":" + pad(t.getUTCMinutes());
  }
  const ICONS = { queued: "…", running: "▶", stopping: "◼…", stopped: "■", completed: "✓", failed: "✗", budget_exhausted: "$✗" };
  function badge(status) {
    const span = document.createElement("span");
    span.className = "status"; span.dataset.status = status;
    const icon = document.createElement("span"); icon.setAttribute("aria-hidden", "true"); icon.textContent = ICONS[status] || "?";
    span.append(icon, " " + status);
    return span.outerHTML;
  }
  // Stop and Resume follow the can_stop / can_resume that every status event and catch-up carries
  // (Job.can_stop / can_resume decide; the page never guesses from the status).
  function showControls(scope, d) {
    scope.querySelectorAll('[data-job-controls="' + d.id + '"]').forEach(function (box) {
      box.querySelectorAll("form").forEach(function (form) {
        const can = form.classList.contains("job-stop-form") ? d.can_stop
          : form.classList.contains("job-resume-form") ? d.can_resume : undefined;
        if (can !== undefined) form.hidden = !can;
      });
      // Continue (Job.can_continue): offered once the job has ended with a checkpoint.
      if (d.can_continue !== undefined) {
        box.querySelectorAll(".job-continue-form").forEach(function (el) { el.hidden = !d.can_continue; });
      }
    });
  }

  // Job (external run): a logged key first seen live gets a line on its prefix's chart, a new chart for a new
  // prefix (dashboard.figures.metric_group's rule). Keys ingestion derives for the standard charts are left out.
  const derivedEl = document.getElementById("derived-keys");
  const derived = new Set(derivedEl ? JSON.parse(derivedEl.textContent) : []);
  const OTHER_GROUP = "other";
  function metricGroup(key) { const i = key.indexOf("/"); return i > 0 ? key.slice(0, i) : OTHER_GROUP; }
  function loggedKeys(m) {
    const box = document.getElementById("logged-charts");
    if (!box) return;
    const known = new Set();
    Object.values(figs).forEach(function (f) {
      if (f.live && f.live.group !== undefined) f.live.traces.forEach(function (t) { known.add(t.y.key); });
    });
    Object.keys(m).sort().forEach(function (key) {
      if (derived.has(key) || known.has(key)) return;
      known.add(key);
      const group = metricGroup(key);
      const f = figs["logged:" + group] || loggedChart(box, group);
      const i = f.spec.data.length;
      const trace = { type: "scatter", mode: "lines+markers", name: group === OTHER_GROUP ? key : key.slice(group.length + 1),
                      x: [], y: [], meta: key, marker: { size: 4 }, line: { width: 2 } };
      f.spec.data.push(trace);
      f.live.traces.push({ trace: i, y: { key: key }, skip_null: true });
      if (f.drawn) Plotly.addTraces(f.el, trace);
    });
  }
  function loggedChart(box, group) {
    const card = document.createElement("div");
    card.className = "card";
    const el = document.createElement("div");
    el.className = "chart"; el.dataset.fig = "logged:" + group; el.dataset.group = group;
    el.setAttribute("role", "img"); el.setAttribute("aria-label", "metrics logged under " + group + ", by step");
    card.append(el);
    // Charts in group order with "other" last, as the server renders them.
    const after = Array.from(box.querySelectorAll(".chart[data-group]")).find(function (c) {
      const g = c.dataset.group;
      return group !== OTHER_GROUP && (g === OTHER_GROUP || g > group);
    });
    box.insertBefore(card, after ? after.closest(".card") : null);
    const empty = document.getElementById("logged-empty");
    if (empty) empty.hidden = true;
    const title = group === OTHER_GROUP ? "Logged: unprefixed keys" : "Logged: " + group + "/";
    const spec = { data: [], layout: { title: { text: title, x: 0, xanchor: "left", font: { size: 15 } }, height: 300,
      margin: { l: 56, r: 16, t: 40, b: 48 }, hovermode: "x unified", showlegend: true, paper_bgcolor: "rgba(0,0,0,0)",
      font: { family: "system-ui, -apple-system, Segoe UI, sans-serif", size: 12, color: "#1d1d1b" },
      legend: { orientation: "h", yanchor: "top", y: -0.2, x: 0 }, colorway: ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#56B4E9", "#CC79A7", "#F0E442", "#000000"],
      xaxis: { title: { text: "step" }, gridcolor: "#e6e6e6", automargin: true }, yaxis: { gridcolor: "#e6e6e6", automargin: true } },
      live: { x: "step", group: group, traces: [] }, empty: "Nothing to draw yet" };
    const f = { el: el, live: spec.live, spec: spec };
    figs["logged:" + group] = f;
    sayEmpty(f);
    return f;
  }

  // Job: the step's kept rollouts replace the table's when the page follows the newest step (no ?step=).
  function showSamples(step, samples) {
    const section = document.getElementById("samples");
    const body = document.getElementById("samples-body");
    if (!section || !body || section.dataset.followLatest !== "true") return;
    body.replaceChildren.apply(body, samples.map(function (s) {
      return row([s.index, code(s.prompt), code(s.completion), num(s.reward, 2), num(s.advantage, 3), s.tool_calls],
                 [null, null, null, "num", "num", "num"]);
    }));
    const pick = document.getElementById("step-pick");
    if (pick) {
      pick.value = step; pick.max = step;
      if (pick.min === "") pick.min = step;
      text("samples-range", "steps " + pick.min + "–" + step + " kept rollouts");
    }
  }
  function addHistory(c) {
    const body = document.getElementById("history-body");
    if (!body) return;
    const to = document.createElement("td");
    to.innerHTML = badge(c.to);
    body.append(row([utc(c.at), c.from || "—", to, c.reason]));
  }
  function showStints(stints) {
    const body = document.getElementById("stints-body");
    if (!body || !stints.length) return;
    body.replaceChildren.apply(body, stints.map(function (s) {
      const ended = s.ended_at ? utc(s.ended_at) + " " + s.end_reason : "running";
      return row([s.node, s.device_name || s.device, utc(s.started_at), ended,
                  s.first_step + "–" + (s.last_step === null ? "" : s.last_step)]);
    }));
  }
  // Job: the cost/IPD chart's points, as the "costs" event carries them (dashboard.figures.cost_ipd_points).
  function costCurve(c) {
    const f = figs.cost;
    if (!f || !c.step.length) return;
    if (!f.drawn) {
      f.spec.data[0].x = c.step; f.spec.data[0].y = c.usd;
      f.spec.data[1].x = c.step; f.spec.data[1].y = c.ipd;
      draw(f);
      return;
    }
    Plotly.restyle(f.el, { x: [c.step, c.step], y: [c.usd, c.ipd] }, [0, 1]);
  }
  // A table row of cells: strings become text (never HTML), elements go in as they are.
  function row(cells, classes) {
    const tr = document.createElement("tr");
    cells.forEach(function (v, i) {
      let td = v;
      if (!(v instanceof Element) || v.tagName !== "TD") {
        td = document.createElement("td");
        if (v instanceof Element) td.append(v); else td.textContent = v === null || v === undefined ? "" : v;
      }
      if (classes && classes[i]) td.className = classes[i];
      tr.append(td);
    });
    return tr;
  }
  function code(t) { const c = document.createElement("code"); c.textContent = t; return c; }
  // "2026-12-01 00:17:15": as the template's date:"Y-m-d H:i:s" shows it (UTC).
  function utc(iso) {
    if (!iso) return "";
    const t = new Date(iso), pad = function (n) { return String(n).padStart(2, "0"); };
    return t.getUTCFullYear() + "-" + pad(t.getUTCMonth() + 1) + "-" + pad(t.getUTCDate()) + " " +
      pad(t.getUTCHours()) + ":" + pad(t.getUTCMinutes()) + ":" + pad(t.getUTCSeconds());
  }

  // Fleet: recount the cards, recolour the heatmap cells that changed, extend the power chart, recount power.
  function fleetSamples(d) {
    if (d.cards) fleetCards(d.cards);
    newestSamples(d);
    const heat = figs.heatmap;
    if (heat && (d.devices.length || (d.stale && d.stale.length))) {
      const trace = heat.el.data[0];
      const z = trace.z.map(function (row) { return row.slice(); });
      const rowOf = {};
      trace.y.forEach(function (name, i) { rowOf[name] = i; });
      d.devices.forEach(function (s) {
        const r = rowOf[s.node];
        if (r !== undefined && s.index < z[r].length) z[r][s.index] = s.util_pct;
      });
      // A stale device's cell is blank, as on a fresh render (its last value is not "now").
      (d.stale || []).forEach(function (cell) {
        const r = rowOf[cell[0]];
        if (r !== undefined && cell[1] < z[r].length) z[r][cell[1]] = null;
      });
      Plotly.restyle(heat.el, { z: [z] }, [0]);
    }
    if (figs.power) {
      const el = figs.power.el;
      if (el.layout.annotations && el.layout.annotations.length) Plotly.relayout(el, { annotations: [] });
      Plotly.extendTraces(el, { x: [[d.ts]], y: [[d.power_kw]] }, [0]);
    }
    text("card-power", Number(d.power_kw).toFixed(2));
  }

  // Fleet: the node table's "Newest sample" ages with the clock, and a node's new sample resets it. Ages are
  // kept as "the sample is this old at this moment of the browser's clock", so the server's clock and the
  // browser's need not agree: the page was rendered with an age, and an event says its own now (d.ts).
  const newestAt = {};
  document.querySelectorAll(".newest-age[data-age-s]").forEach(function (td) {
    if (td.dataset.ageS !== "") newestAt[td.dataset.node] = Date.now() - Number(td.dataset.ageS) * 1000;
  });
  function newestSamples(d) {
    d.devices.forEach(function (s) {
      const at = Date.now() - (Date.parse(d.ts) - Date.parse(s.ts));
      if (!(newestAt[s.node] >= at)) newestAt[s.node] = at;
    });
    showAges();
  }
  function showAges() {
    document.querySelectorAll(".newest-age[data-node]").forEach(function (td) {
      const at = newestAt[td.dataset.node];
      if (at !== undefined) td.textContent = age((Date.now() - at) / 1000);
    });
  }
  if (page === "fleet") setInterval(showAges, 1000);
  // The template filter `age`.
  function age(seconds) {
    seconds = Math.max(0, seconds);
    if (seconds < 90) return Math.round(seconds) + " s ago";
    if (seconds < 5400) return Math.round(seconds / 60) + " min ago";
    if (seconds < 172800) return (seconds / 3600).toFixed(1) + " h ago";
    return Math.round(seconds / 86400) + " d ago";
  }

  // Fleet: today's cost and IPD, as the attribute task computed them (the "costs" event).
  function fleetCosts(f) {
    const ipd = document.getElementById("card-ipd");
    if (ipd) ipd.replaceChildren.apply(ipd, f.envs.length ? f.envs.map(function (e) {
      const line = document.createElement("div");
      line.dataset.env = e.env;
      line.textContent = e.env + " " + (e.ipd_points_per_usd === null ? e.ipd_state : e.ipd_display + " pts/$");
      return line;
    }) : ["—"]);
    text("card-attributed-usd", f.attributed_display);
    text("card-idle-usd", f.idle_display);
    text("card-fleet-usd", f.fleet_display);
    text("card-ipd-as-of", hhmm(f.as_of));
  }
  function fleetCards(c) {
    text("card-busy", c.busy);
    text("card-idle", c.idle);
    text("card-stale", c.stale);
    text("card-devices", c.devices);
    if (c.burn_usd_per_h !== undefined) text("card-burn", usd(c.burn_usd_per_h));
    const stale = document.getElementById("card-stale");
    if (stale) stale.closest(".card").classList.toggle("stat-warn", c.stale > 0);
  }

  // Job: the job resumed from its checkpoint at step k, so steps after k run again: drop their points.
  function rewindTo(k) {
    pending.forEach(function (q) {
      q.forEach(function (pts) {
        const keep = pts.x.map(function (x) { return xValue(x) <= k; });
        pts.x = pts.x.filter(function (_, i) { return keep[i]; });
        pts.y = pts.y.filter(function (_, i) { return keep[i]; });
      });
    });
    Object.values(figs).forEach(function (f) {
      if (!f.live || !f.drawn) return;
      const xs = [], ys = [], idx = [];
      f.live.traces.forEach(function (t) {
        const trace = f.el.data[t.trace];
        if (!trace || !trace.x) return;
        const keep = Array.from(trace.x, function (x) { return xValue(x) <= k; });
        if (keep.every(Boolean)) return;
        xs.push(Array.from(trace.x).filter(function (_, i) { return keep[i]; }));
        ys.push(Array.from(trace.y).filter(function (_, i) { return keep[i]; }));
        idx.push(t.trace);
      });
      if (idx.length) Plotly.restyle(f.el, { x: xs, y: ys }, idx);
    });
    root.dataset.lastStep = k < 0 ? "" : k;
    text("steps-done", Math.max(k, 0));
    const prog = document.getElementById("job-progress");
    if (prog) prog.value = Math.max(k, 0);
  }

  // Jobs: a row's reward sparkline grows a point a step. It holds at most the table's data-spark-max
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
    svg.setAttribute("aria-label", "reward trend, latest " + num(good[good.length - 1][1], 3));
  }

  // -- the Start form: a preset fills the fields ------------------------------------------------
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
  window.Yardstick = { figs: figs, setLive: setLive, handle: handle };
})();
