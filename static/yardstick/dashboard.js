// Yardstick pages: draw the figures built in Python, and keep them live over the WebSocket.
//
// What every page shares is here: the figures, the live toggle and socket, the event dispatch and the small
// formatters. What a page does with the events is in its own file, loaded after this one (fleet.js, node.js,
// jobs.js, job.js): it registers its handlers with Yardstick.on(kind, fn), what to fetch after every
// (re)connect with Yardstick.onCatchUp(fn), and the topics to follow when live is turned on
// (Yardstick.resumeTopics). The Compare and Costs pages only draw their figures.
//
// The page's root element (.page) says which page it is (data-page) and which live
// topics it follows (data-topics, empty when paused or not live). Figures come from
// <script id="figures">; a figure with a `live` spec grows with Plotly.extendTraces.
(function () {
  "use strict";
  const root = document.querySelector(".page");
  if (!root) return;
  const page = root.dataset.page;
  const figs = {};
  window.__yardstickLoadedAt = window.__yardstickLoadedAt || Date.now(); // tests check the page never reloads
  const Y = window.Yardstick = { root: root, page: page, figs: figs, resumeTopics: "" };

  // -- figures ---------------------------------------------------------------------------
  const figuresEl = document.getElementById("figures");
  const specs = figuresEl ? JSON.parse(figuresEl.textContent) : {};
  const config = { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
  // fn once plotly.js has run: at once, or on a page that defers it (the fleet page) once its script has
  // called Yardstick.loadPlotly() and plotly.js has come.
  const plotlyWaiting = [];
  Y.whenPlotly = function (fn) {
    if (window.Plotly || !document.getElementById("plotly-preload")) fn();
    else plotlyWaiting.push(fn);
  };
  Y.loadPlotly = function () {
    const preload = document.getElementById("plotly-preload");
    if (window.Plotly || !preload || document.getElementById("plotly-js")) return;
    const tag = document.createElement("script");
    tag.id = "plotly-js";
    tag.src = preload.href;  // what the preload has been fetching meanwhile
    tag.addEventListener("load", function () { plotlyWaiting.splice(0).forEach(function (fn) { fn(); }); });
    document.head.appendChild(tag);
  };
  Y.whenPlotly(function () {
    document.querySelectorAll(".chart[data-fig]").forEach(function (el) {
      const spec = specs[el.dataset.fig];
      if (!spec || !window.Plotly) return;
      const f = { el: el, live: spec.live || null, spec: spec };
      figs[el.dataset.fig] = f;
      if (spec.empty) sayEmpty(f); else draw(f);
    });
  });
  function draw(f) {
    f.el.replaceChildren();
    Plotly.newPlot(f.el, f.spec.data, f.spec.layout, config).then(function () { Y.fitLegend(f.el); });
    f.el.dataset.drawn = "true";
    f.drawn = true;
  }
  // A legend of many entries (a run's twenty logged keys) wraps into rows taller than the room under the plot:
  // Plotly then draws them past the figure, over the next card. The figure grows by what its legend needs beyond
  // LEGEND_ROOM (two rows fit the height it was given), after each draw: a narrower window wraps more rows.
  const LEGEND_ROOM = 44;
  Y.fitLegend = function (el) {
    const base = el.layout && el.layout.height;
    const legend = el.layout && el.layout.legend;
    if (!base || !legend || legend.yref !== "container" || el.dataset.fitsLegend) return;
    el.dataset.fitsLegend = "true";
    function fit() {
      const box = el.querySelector(".legend");
      if (!box) return;
      const want = base + Math.max(0, Math.ceil(box.getBoundingClientRect().height) - LEGEND_ROOM);
      if (Math.abs(el.layout.height - want) > 2) Plotly.relayout(el, { height: want });
    }
    fit();
    el.on("plotly_afterplot", fit);
  };
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
      if (f.spec.range_ms) return slide(f, xs, ys, idx);
      // "no data yet" goes with the first value; points without one ("not reported by this device") keep the note
      if (el.layout.annotations && el.layout.annotations.length && anyValue(ys)) Plotly.relayout(el, { annotations: [] });
      Plotly.extendTraces(el, { x: xs, y: ys }, idx);
    });
  }
  // A chart of a time range (figures.over_range) keeps the range's length and slides along with its newest
  // point, dropping the points that fall off its start: a page left open for days draws no more than a fresh one.
  // xs[k], ys[k]: the new points of trace idx[k]. The "no data yet" note goes with the first.
  Y.slide = slide;
  function slide(f, xs, ys, idx) {
    const el = f.el, span = f.spec.range_ms[1] - f.spec.range_ms[0];
    let end = f.spec.range_ms[1];
    xs.forEach(function (x) { x.forEach(function (v) { end = Math.max(end, xValue(v)); }); });
    const start = end - span, update = { x: [], y: [], text: [] }, all = [];
    el.data.forEach(function (t, i) {
      let cut = 0;
      while (cut < t.x.length && xValue(t.x[cut]) < start) cut++;
      const k = idx.indexOf(i);
      update.x.push(t.x.slice(cut).concat(k < 0 ? [] : xs[k]));
      update.y.push(t.y.slice(cut).concat(k < 0 ? [] : ys[k]));
      update.text.push(Array.isArray(t.text) ? t.text.slice(cut) : t.text);  // hover texts stay with their points
      all.push(i);
    });
    const layout = { "xaxis.range": [new Date(start).toISOString(), new Date(end).toISOString()] };
    if (anyValue(ys)) layout.annotations = [];  // a chart of a figure its devices do not report keeps saying so
    Plotly.update(el, update, layout, all);
  }
  function anyValue(ys) {
    return ys.some(function (y) { return y.some(function (v) { return v !== null && v !== undefined; }); });
  }

  // The job resumed from an earlier checkpoint: drop queued points past step k (job.js redraws the rest).
  function dropQueuedAfter(k) {
    pending.forEach(function (q) {
      q.forEach(function (pts) {
        const keep = pts.x.map(function (x) { return xValue(x) <= k; });
        pts.x = pts.x.filter(function (_, i) { return keep[i]; });
        pts.y = pts.y.filter(function (_, i) { return keep[i]; });
      });
    });
  }

  // -- live state: the toggle, the indicator, the socket with back-off ----------------------
  const stateEl = document.getElementById("live-state");
  const toggle = document.getElementById("live-toggle");
  let socket = null, retry = 0, timer = null, wanted = !!root.dataset.topics;
  // What to follow: the page's topics, or when it was paused on load, what its script follows once live.
  function followed() { return root.dataset.topics || Y.resumeTopics || ""; }
  function setState(state, text) {
    if (!stateEl) return;
    stateEl.dataset.state = state;
    stateEl.textContent = text || state;
  }
  function connect() {
    const topics = followed();
    if (!topics) return;
    clearTimeout(timer);
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    setState(retry ? "reconnecting" : "connecting");
    const more = Y.socketQuery ? Y.socketQuery() : "";  // a page's own parameters (fleet.js: the layout it has)
    socket = new WebSocket(scheme + location.host + "/ws/live?topics=" + encodeURIComponent(topics) + (more ? "&" + more : ""));
    socket.onopen = function () { retry = 0; setState("live"); };
    socket.binaryType = "arraybuffer";
    socket.onmessage = function (msg) {
      // Binary messages are the fleet's frames (dashboard/fleetstate.py): fleet.js decodes them.
      if (typeof msg.data !== "string") { handle({ topic: "fleet", kind: "frame", data: msg.data }); return; }
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
  // Connect once every script of the page has registered its handlers.
  if (wanted) {
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", connect);
    else connect();
  }

  // -- events --------------------------------------------------------------------------------
  const handlers = {};  // kind -> [fn]: the page's script adds its own
  function on(kind, fn) { (handlers[kind] = handlers[kind] || []).push(fn); }
  // On every (re)connect, catch up on what happened while the socket was not listening
  // (between the page's render and the subscription, or during a reconnect).
  const catchUps = [];
  function onCatchUp(fn) { catchUps.push(fn); }
  function catchUp() {
    catchUps.forEach(function (fn) {
      fn().catch(function () { /* the next reconnect tries again */ });
    });
  }
  on("subscribed", catchUp);
  on("reading", function (ev) {
    // The server could not read the database (or can again): its socket is open, the data is not.
    if (ev.data.ok) { setState("live"); catchUp(); }
    else setState("reconnecting", "reconnecting: the database is not answering");
  });
  // An event from the socket: the page's handlers, then a DOM event (tests record them). A catch-up runs
  // the handlers alone: what it fetched is not an event the server sent.
  function run(ev) { (handlers[ev.kind] || []).forEach(function (h) { h(ev); }); }
  function handle(ev) {
    run(ev);
    document.dispatchEvent(new CustomEvent("yardstick:event", { detail: ev }));
  }

  // -- formatting and small DOM helpers, for the pages' scripts ------------------------------------
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
      // A launched job's controls (Restart, and why it cannot resume) are the server's to word: redrawn from it.
      if (box.dataset.part && d.status && box.dataset.status !== d.status) {
        box.dataset.status = d.status;  // asked once per change
        swapPart('[data-job-controls="' + d.id + '"]', box.dataset.part);
      }
    });
  }
  // Replace the element `selector` finds with the part of the page the server renders at `url` now
  // (dashboard/views_launch.py job_part); of several asked for one element, the newest answer wins.
  const swaps = {};
  async function swapPart(selector, url) {
    const mine = swaps[selector] = (swaps[selector] || 0) + 1;
    const resp = await fetch(url, { cache: "no-store" });
    if (!resp.ok || swaps[selector] !== mine) return;
    const tpl = document.createElement("template");
    tpl.innerHTML = (await resp.text()).trim();
    const fresh = tpl.content.firstElementChild;
    const now = document.querySelector(selector);
    if (fresh && now) now.replaceWith(fresh);
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

  Object.assign(Y, {
    draw: draw, sayEmpty: sayEmpty, xValue: xValue, metric: metric, extend: extend, dropQueuedAfter: dropQueuedAfter,
    setLive: setLive, on: on, onCatchUp: onCatchUp, run: run, handle: handle,
    text: text, shown: shown, withUnit: withUnit, num: num, usd: usd, hhmm: hhmm, badge: badge,
    showControls: showControls, swapPart: swapPart, row: row, code: code, utc: utc,
  });
})();
