// Fleet page: the layout and frames of dashboard/fleetstate.py, kept in typed arrays (a few bytes a device),
// draw the heatmap (a cell per device, or per group past MAX_CELLS), the lists of devices to act on and the
// node table's live figures; the cards come computed from the server. The page starts from the layout and
// frame it was rendered with (#fleet-start) and follows the "fleet" topic's frames; today's cost and IPD
// card follows the "costs" events. Grouping and filters live in the URL.
(function () {
  "use strict";
  const Y = window.Yardstick;
  if (!Y || Y.page !== "fleet") return;
  const figs = Y.figs, text = Y.text;
  Y.resumeTopics = "fleet,costs";
  // The socket's welcome leaves out the layout this page has (at 100,000 devices, 2 MB sent and read again).
  Y.socketQuery = function () { return F.layout ? "layout=" + encodeURIComponent(F.layout.version) : ""; };

  const MAX_CELLS = 2000;  // dashboard/views.py FLEET_MAX_CELLS
  const PLOTLY_AFTER_MS = 1500;  // plotly.js runs at the first frame, or this long after the page's script
  const LIST_SHOWN = 8;
  const IDLE = 1, STALE = 2, UNHEALTHY = 4, THROTTLED = 8;
  const NO_UTIL = 255, NO_POWER = 65535, NO_AGE = 65535;
  const GROUP_ORDER = ["pool", "rack", "team"];  // auto grouping past MAX_CELLS nodes tries these labels first
  const F = Y.fleet = { layout: null, seq: -1, header: null, frames: 0, why: {} };
  const heatEl = document.querySelector('.chart[data-fig="heatmap"]');
  figs.heatmap = { el: heatEl };

  // -- the view: grouping, cell and filters, from and to the URL ------------------------------------
  function readView() {
    const p = new URLSearchParams(location.search);
    const filters = {};
    p.forEach(function (value, key) {
      if (key === "node" || key === "model" || key.indexOf("label:") === 0) filters[key] = value;
    });
    return { group: p.get("group") || "auto", cell: p.get("cell") || "mean", filters: filters };
  }
  let view = readView();
  function pushView(extra) {
    const url = new URL(location.href);
    ["group", "cell", "node", "model", "page"].forEach(function (k) { url.searchParams.delete(k); });
    Array.from(url.searchParams.keys()).forEach(function (k) { if (k.indexOf("label:") === 0) url.searchParams.delete(k); });
    if (view.group !== "auto") url.searchParams.set("group", view.group);
    if (view.cell !== "mean") url.searchParams.set("cell", view.cell);
    Object.keys(view.filters).forEach(function (k) { url.searchParams.set(k, view.filters[k]); });
    Object.keys(extra || {}).forEach(function (k) { url.searchParams.set(k, extra[k]); });
    history.pushState(null, "", url);
    shownCache = null;
    syncControls();
    draw();
    loadTable(url.search);
  }
  window.addEventListener("popstate", function () {
    view = readView(); shownCache = null; syncControls(); draw(); loadTable(location.search);
  });

  const groupSel = document.getElementById("fleet-group"), cellSel = document.getElementById("fleet-cell");
  if (groupSel) groupSel.addEventListener("change", function () { view.group = groupSel.value; pushView(); });
  if (cellSel) cellSel.addEventListener("change", function () { view.cell = cellSel.value; pushView(); });
  function syncControls() {
    if (groupSel) groupSel.value = view.group;
    if (cellSel) cellSel.value = view.cell;
    const box = document.getElementById("fleet-filters");
    if (!box) return;
    box.replaceChildren.apply(box, Object.keys(view.filters).map(function (k) {
      const b = document.createElement("button");
      b.type = "button"; b.className = "badge filter"; b.dataset.filter = k;
      b.title = "remove this filter";
      b.textContent = (k.indexOf("label:") === 0 ? k.slice(6) : k) + " = " + view.filters[k] + " ×";
      b.addEventListener("click", function () { delete view.filters[k]; pushView(); });
      return b;
    }));
  }

  // -- the layout and the frames ------------------------------------------------------------------
  function setLayout(data) {
    const n = data.node.length;
    F.layout = data; F.n = n; F.seq = -1;
    F.util = new Uint8Array(n).fill(NO_UTIL);
    F.state = new Uint8Array(n).fill(STALE);
    F.power = new Uint16Array(n).fill(NO_POWER);
    F.sampleAt = new Float64Array(n).fill(NaN);  // the browser's clock when the sample was taken
    F.cpu = new Set(data.cpu);
    F.nodeStart = new Int32Array(data.nodes.length + 1);
    for (let i = 0, j = 0; j <= data.nodes.length; j++) {
      while (i < n && data.node[i] < j) i++;
      F.nodeStart[j] = i;
    }
    F.nodeAt = {};
    data.nodes.forEach(function (nd, i) { F.nodeAt[nd[0]] = i; });
    shownCache = null;
  }
  const decoder = new TextDecoder();
  function applyFrame(buf) {
    const bytes = new Uint8Array(buf);
    if (bytes[0] !== 89 || bytes[1] !== 70 || bytes[2] !== 49) return null;  // "YF1"
    const kind = String.fromCharCode(bytes[3]);
    const size = new DataView(buf).getUint32(4, true);
    const header = JSON.parse(decoder.decode(bytes.subarray(8, 8 + size)));
    if (!F.layout || header.layout !== F.layout.version || header.n !== F.n) return null;  // its layout comes first
    if (kind === "D" && F.seq < 0) return null;  // a change to frames this page has not had
    let off = 8 + size;
    const m = header.m, positions = new Int32Array(m);
    if (kind === "D") {
      const mapBytes = (F.n + 7) >> 3;
      let j = 0;
      for (let b = 0; b < mapBytes; b++) {
        const v = bytes[off + b];
        if (v) for (let bit = 0; bit < 8; bit++) if (v & (1 << bit)) positions[j++] = b * 8 + bit;
      }
      off += mapBytes;
    } else {
      for (let j = 0; j < m; j++) positions[j] = j;
    }
    const util = bytes.subarray(off, off + m), state = bytes.subarray(off + m, off + 2 * m);
    off += 2 * m;
    if (off % 2) off += 1;
    const power = new Uint16Array(buf.slice(off, off + 2 * m)), age = new Uint16Array(buf.slice(off + 2 * m, off + 4 * m));
    const at = Date.now();
    for (let j = 0; j < m; j++) {
      const p = positions[j];
      F.util[p] = util[j]; F.state[p] = state[j]; F.power[p] = power[j];
      F.sampleAt[p] = age[j] === NO_AGE ? NaN : at - age[j] * 10;
    }
    Object.keys(header.old_ages || {}).forEach(function (p) { F.sampleAt[Number(p)] = at - header.old_ages[p] * 1000; });
    if (header.unhealthy) F.why = header.unhealthy;
    F.seq = header.seq; F.header = header; F.frames += 1;
    F.lastChanged = positions;
    return header;
  }

  Y.on("layout", function (ev) {
    if (!F.layout || F.layout.version !== ev.data.version) setLayout(ev.data);
    else F.seq = -1;  // the same fleet: the whole frame that follows replaces what the page has
  });
  Y.on("frame", function (ev) {
    Y.loadPlotly();  // the page is live: now the charts
    const header = applyFrame(ev.data);
    if (!header) return;
    if (figs.power) livePower(figs.power, header);
    schedule();
  });

  // The power chart slides along with the newest frame (Yardstick.slide), with a live point per span/720 (5 s at
  // least): within that slot the newest frame's power replaces the last point rather than adding one.
  let slotAt = -Infinity;  // when the chart's newest live point opened its slot
  function livePower(f, header) {
    const t = Date.parse(header.ts), trace = f.el.data && f.el.data[0];
    if (!trace || !f.el.layout || isNaN(t)) return;
    if (t - slotAt < Math.max(5000, (f.spec.range_ms[1] - f.spec.range_ms[0]) / 720)) {
      trace.x.pop(); trace.y.pop();  // slide draws the trace anew from these arrays
    } else {
      slotAt = t;
    }
    Y.slide(f, [[header.ts]], [[header.cards.power_kw]], [0]);
  }

  // Redraw at most once an animation frame, whatever the number of frames that came.
  let pending = false;
  function schedule() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(function () { pending = false; draw(); });
  }
  function draw() {
    if (!F.layout) return;
    if (F.header) fleetCards(F.header.cards);
    drawHeatmap();
    drawLists();
    nodeRows();
    document.dispatchEvent(new CustomEvent("yardstick:fleet-drawn", { detail: F.header }));
  }

  // -- which devices the view shows, and how they group -------------------------------------------
  let shownCache = null;
  function shown() {
    if (shownCache) return shownCache;
    const L = F.layout, f = view.filters, out = [];
    const model = f.model !== undefined ? L.models.indexOf(f.model) : null;
    const labelKeys = Object.keys(f).filter(function (k) { return k.indexOf("label:") === 0; });
    for (let i = 0; i < F.n; i++) {
      const nd = L.nodes[L.node[i]];
      if (f.node !== undefined && nd[0] !== f.node) continue;
      if (model !== null && L.model[i] !== model) continue;
      if (labelKeys.some(function (k) { return String(nd[1][k.slice(6)] === undefined ? "" : nd[1][k.slice(6)]) !== f[k]; })) continue;
      out.push(i);
    }
    shownCache = out;
    return out;
  }
  function keyOf(group) {
    const L = F.layout;
    if (group === "node") return function (i) { return L.nodes[L.node[i]][0]; };
    if (group === "model") return function (i) { return L.models[L.model[i]] || "(no model)"; };
    const label = group.slice(6);
    return function (i) { const v = L.nodes[L.node[i]][1][label]; return v === undefined || v === "" ? "(no " + label + ")" : String(v); };
  }
  function distinct(list, key, limit) {
    const seen = new Set();
    for (let j = 0; j < list.length; j++) { seen.add(key(list[j])); if (seen.size > limit) break; }
    return seen.size;
  }
  // "auto": every device while they fit, else nodes, else the first of pool, rack and team labels that fits, else GPU model.
  function grouping(list) {
    if (view.group !== "auto") return view.group;
    if (list.length <= MAX_CELLS) return "device";
    if (distinct(list, keyOf("node"), MAX_CELLS) <= MAX_CELLS) return "node";
    for (const k of GROUP_ORDER) {
      const has = F.layout.nodes.some(function (nd) { return nd[1][k] !== undefined; });
      if (has && distinct(list, keyOf("label:" + k), MAX_CELLS) <= MAX_CELLS) return "label:" + k;
    }
    return "model";
  }
  function fresh(i) { return (F.state[i] & 3) !== STALE; }
  function label(i) { return F.cpu.has(i) ? "CPU" : "GPU " + F.layout.index[i]; }
  function deviceText(i) {
    const L = F.layout, flags = L.flags[i];
    const u = F.util[i];
    const what = !fresh(i) ? "stale" : (u === NO_UTIL ? "no reading" : u + "%");
    return esc(L.nodes[L.node[i]][0] + " / " + label(i) + " " + (L.models[L.model[i]] || "") + ": " + what
      + (flags & 1 ? " · simulated" : (flags & 2 ? " · power estimated" : ""))
      + (F.state[i] & UNHEALTHY ? " · ✗ unhealthy: " + ((F.why || {})[i] || "a critical health event in 24 h") : "")
      + (fresh(i) && F.state[i] & THROTTLED ? " · throttled" : ""));
  }
  function esc(s) { return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;"); }

  // -- the heatmap ----------------------------------------------------------------------------------
  let drawnMode = null;
  function drawHeatmap() {
    if (!heatEl || !window.Plotly) return;
    const list = shown(), mode = grouping(list);
    const note = document.getElementById("fleet-heatmap-note");
    if (!list.length) {
      heatEl.replaceChildren(Object.assign(document.createElement("p"), {
        className: "chart-empty", textContent: F.n ? "No device matches the filter." : "No device has reported yet." }));
      heatEl.dataset.drawn = "empty"; drawnMode = null;
      return;
    }
    const fig = mode === "device" ? deviceFigure(list) : groupFigure(list, mode);
    if (note) note.textContent = fig.note;
    if (drawnMode === null) heatEl.replaceChildren();
    Plotly.react(heatEl, fig.data, fig.layout, { responsive: true, displaylogo: false });
    heatEl.dataset.drawn = "true";
    heatEl.dataset.group = mode;
    if (!heatEl.dataset.clicks) {
      heatEl.dataset.clicks = "1";
      heatEl.on("plotly_click", function (e) { if (e.points && e.points[0]) drill(e.points[0]); });
    }
    drawnMode = mode;
    F.groups = fig.groups || null;
  }
  function deviceFigure(list) {
    const L = F.layout, rows = [], rowOf = {};
    let width = 0;
    list.forEach(function (i) { width = Math.max(width, L.index[i] + 1); });
    const columns = [];
    for (let c = 0; c < width; c++) columns.push({});
    const z = [], tx = [];
    list.forEach(function (i) {
      const name = L.nodes[L.node[i]][0];
      if (rowOf[name] === undefined) { rowOf[name] = rows.length; rows.push(name); z.push(new Array(width).fill(null)); tx.push(new Array(width).fill("")); }
      const r = rowOf[name], c = L.index[i];
      z[r][c] = fresh(i) && F.util[i] !== NO_UTIL ? F.util[i] : null;
      tx[r][c] = deviceText(i);
      columns[c][label(i)] = true;
    });
    const x = columns.map(function (seen, c) { return Object.keys(seen).join(" / ") || "device " + c; });
    return {
      note: "A cell per device (" + list.length.toLocaleString("en-US") + "). Blank cells: stale devices. Click one for its node.",
      data: [{ type: "heatmap", z: z, x: x, y: rows, text: tx, hovertemplate: "%{text}<extra></extra>", colorscale: "Cividis",
        zmin: 0, zmax: 100, xgap: 2, ygap: 2, hoverongaps: false, colorbar: { title: { text: "util %" }, thickness: 12 } }],
      layout: baseLayout("Utilization by node and device (now)", Math.max(220, Math.min(1400, 70 + 22 * rows.length)), {
        yaxis: { autorange: "reversed", automargin: true, type: "category", tickmode: "array", tickvals: rows,
          // Escaped and shortened as dashboard.figures.short does: Plotly reads tick text as markup.
          ticktext: rows.map(function (r) { return esc(r.length > 32 ? r.slice(0, 31) + "…" : r); }) },
        xaxis: { side: "top", automargin: true, type: "category" } }),
      groups: null,
    };
  }
  function groupFigure(list, mode) {
    const key = keyOf(mode), at = new Map(), groups = [];
    list.forEach(function (i) {
      const k = key(i);
      let g = at.get(k);
      if (!g) { g = { key: k, count: 0, reporting: 0, sum: 0, worst: null, stale: 0, unhealthy: 0, idle: 0 }; at.set(k, g); groups.push(g); }
      g.count += 1;
      if (F.state[i] & UNHEALTHY) g.unhealthy += 1;
      if (!fresh(i)) { g.stale += 1; return; }
      if ((F.state[i] & 3) === IDLE) g.idle += 1;
      if (F.util[i] === NO_UTIL) return;
      g.reporting += 1; g.sum += F.util[i];
      g.worst = g.worst === null ? F.util[i] : Math.min(g.worst, F.util[i]);
    });
    groups.sort(function (a, b) { return a.key < b.key ? -1 : a.key > b.key ? 1 : 0; });
    const total = groups.length, drawn = groups.slice(0, MAX_CELLS);
    const cols = Math.max(1, Math.min(drawn.length, Math.ceil(Math.sqrt(drawn.length * 3))));
    const rowsN = Math.ceil(drawn.length / cols);
    // z the groups' figures; `quiet` the groups with none (every device stale or without a reading), drawn
    // grey by a trace of their own rather than left as gaps nobody sees; few cells are labelled on the chart.
    const grid = function (v) { const m = []; for (let r = 0; r < rowsN; r++) m.push(new Array(cols).fill(v)); return m; };
    const z = grid(null), quiet = grid(null), tx = grid(""), labels = grid(""), quietLabels = grid("");
    drawn.forEach(function (g, k) {
      const r = Math.floor(k / cols), c = k % cols;
      const mean = g.reporting ? Math.round(g.sum / g.reporting) : null;
      const value = view.cell === "worst" ? g.worst : mean;
      z[r][c] = value;
      if (value === null) quiet[r][c] = 0;
      const name = g.key.length > 20 ? g.key.slice(0, 19) + "…" : g.key;
      if (value !== null) labels[r][c] = esc(name) + "<br>" + value + "%";
      else quietLabels[r][c] = esc(name) + "<br>" + (g.stale === g.count ? "stale" : "no reading");
      tx[r][c] = esc(g.key) + "<br>mean " + (mean === null ? "—" : mean + "%") + " · worst " + (g.worst === null ? "—" : g.worst + "%")
        + "<br>" + g.count + " device" + (g.count === 1 ? "" : "s") + " · " + g.idle + " idle · " + g.stale + " stale"
        + (g.unhealthy ? " · " + g.unhealthy + " unhealthy" : "");
    });
    // Each trace labels its own cells (a heatmap writes its text on its gaps too).
    const cell = { texttemplate: cols <= 6 ? "%{text}" : "", textfont: { size: 12 }, hovertext: tx,
      hovertemplate: "%{hovertext}<extra></extra>", xgap: 2, ygap: 2, hoverongaps: false };
    const what = mode === "node" ? "node" : mode === "model" ? "GPU model" : mode.slice(6) + " label";
    return {
      note: "A cell per " + what + " (" + total.toLocaleString("en-US") + (total > drawn.length ? ", the first " + drawn.length.toLocaleString("en-US") + " by name shown: filter to see the rest" : "")
        + ") of " + list.length.toLocaleString("en-US") + " devices, coloured by its " + (view.cell === "worst" ? "worst (lowest)" : "mean") + " utilization"
        + (quiet.some(function (row) { return row.indexOf(0) >= 0; }) ? "; grey: no device of the group reporting" : "") + ". Click one to drill down.",
      data: [Object.assign({ type: "heatmap", z: z, colorscale: "Cividis", zmin: 0, zmax: 100,
        colorbar: { title: { text: "util %" }, thickness: 12 }, text: labels }, cell),
      Object.assign({ type: "heatmap", z: quiet, colorscale: [[0, "#d9d9d9"], [1, "#d9d9d9"]], showscale: false,
        text: quietLabels }, cell)],
      layout: baseLayout("Utilization by " + what + " (now)", Math.max(220, Math.min(1400, 70 + 26 * rowsN)), {
        yaxis: { autorange: "reversed", visible: false }, xaxis: { visible: false } }),
      groups: { mode: mode, cols: cols, list: drawn },
    };
  }
  function baseLayout(title, height, axes) {
    return Object.assign({ title: { text: title, font: { size: 14 } }, height: height, margin: { l: 40, r: 20, t: 60, b: 20 },
      hovermode: "closest", paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)" }, axes);
  }
  // A click drills down: a group filters the view to it and shows what it holds one level finer; a device opens its node.
  const FINER = { node: "device", model: "auto" };
  function drill(pt) {
    if (!F.groups) {
      const name = pt.y;
      if (name !== undefined) location.href = "/nodes/" + encodeURIComponent(name).replace(/%2F/g, "/");
      return;
    }
    const g = F.groups.list[pt.y * F.groups.cols + pt.x];
    if (!g) return;
    const mode = F.groups.mode;
    // A group of nodes without the label ("(no pool)") filters to the label's empty value.
    view.filters[mode] = mode.indexOf("label:") === 0 && g.key === "(no " + mode.slice(6) + ")" ? "" : g.key;
    view.group = FINER[mode] || "auto";
    if (mode !== "node" && view.group === "auto" && F.layout.nodes.length > MAX_CELLS) view.group = "node";
    pushView();
  }

  // -- the lists beside it ------------------------------------------------------------------------------
  const LISTS = {
    idle: { pick: function (i) { return fresh(i) && (F.state[i] & 3) === IDLE; },
      order: function (a, b) { return utilOf(a) - utilOf(b) || powerOf(b) - powerOf(a); } },
    throttled: { pick: function (i) { return fresh(i) && (F.state[i] & THROTTLED); },
      order: function (a, b) { return utilOf(a) - utilOf(b); } },
    unhealthy: { pick: function (i) { return F.state[i] & UNHEALTHY; }, order: null },
    stale: { pick: function (i) { return !fresh(i); },
      order: function (a, b) { return sampleOf(a) - sampleOf(b); } },
  };
  function utilOf(i) { return F.util[i] === NO_UTIL ? -1 : F.util[i]; }
  function powerOf(i) { return F.power[i] === NO_POWER ? -1 : F.power[i]; }
  function sampleOf(i) { return isNaN(F.sampleAt[i]) ? -Infinity : F.sampleAt[i]; }
  function drawLists() {
    const list = shown();
    document.querySelectorAll(".fleet-list[data-list]").forEach(function (box) {
      const spec = LISTS[box.dataset.list];
      if (!spec) return;
      const hit = list.filter(spec.pick);
      if (spec.order) {
        // Only the worst few are shown: a partial pick rather than sorting thousands.
        hit.sort(spec.order);
      }
      box.querySelector("[data-count]").textContent = hit.length.toLocaleString("en-US");
      const ol = box.querySelector("ol");
      ol.replaceChildren.apply(ol, hit.slice(0, LIST_SHOWN).map(function (i) {
        const li = document.createElement("li");
        const a = document.createElement("a");
        const node = F.layout.nodes[F.layout.node[i]][0];
        a.href = "/nodes/" + encodeURIComponent(node).replace(/%2F/g, "/");
        a.textContent = node + " / " + label(i);
        li.dataset.position = i;
        li.append(a, " " + (F.layout.models[F.layout.model[i]] || "") + " · " + describe(box.dataset.list, i));
        return li;
      }));
      const more = box.querySelector("[data-more]");
      more.hidden = hit.length <= LIST_SHOWN;
      more.textContent = "and " + (hit.length - LIST_SHOWN).toLocaleString("en-US") + " more";
    });
  }
  function describe(kind, i) {
    if (kind === "stale") return isNaN(F.sampleAt[i]) ? "never reported" : "newest sample " + age((Date.now() - F.sampleAt[i]) / 1000);
    const u = F.util[i] === NO_UTIL ? "no reading" : F.util[i] + "%";
    const w = F.power[i] === NO_POWER ? "" : " · " + F.power[i].toLocaleString("en-US") + " W";
    return fresh(i) ? u + w : "stale";
  }

  // -- the node table: paged, sorted and searched on the server; its live figures here --------------
  function nodeRows() {
    document.querySelectorAll("#node-table tr[data-position]").forEach(function (tr) {
      const node = F.nodeAt[tr.dataset.node];
      if (node === undefined) return;
      let sum = 0, count = 0, watts = 0;
      for (let i = F.nodeStart[node]; i < F.nodeStart[node + 1]; i++) {
        if (!fresh(i)) continue;
        if (F.util[i] !== NO_UTIL) { sum += F.util[i]; count += 1; }
        if (F.power[i] !== NO_POWER) watts += F.power[i];
      }
      tr.querySelector(".node-util").textContent = count ? Math.round(sum / count) + "%" : "—";
      tr.querySelector(".node-power").textContent = watts.toLocaleString("en-US") + " W";  // the template's num:0
    });
    showAges();
  }
  // The node table's "Newest sample" ages with the clock: each device's sample time is kept on the browser's
  // clock (a frame says how old each sample was when it was sent), so the two clocks need not agree.
  function showAges() {
    document.querySelectorAll(".newest-age[data-node]").forEach(function (td) {
      const node = F.nodeAt ? F.nodeAt[td.dataset.node] : undefined;
      if (node === undefined) return;
      let newest = NaN;
      for (let i = F.nodeStart[node]; i < F.nodeStart[node + 1]; i++) {
        if (!isNaN(F.sampleAt[i]) && !(newest >= F.sampleAt[i])) newest = F.sampleAt[i];
      }
      if (!isNaN(newest)) td.textContent = age((Date.now() - newest) / 1000);
    });
  }
  setInterval(showAges, 1000);
  // The template filter `age`.
  function age(seconds) {
    seconds = Math.max(0, seconds);
    if (seconds < 90) return Math.round(seconds) + " s ago";
    if (seconds < 5400) return Math.round(seconds / 60) + " min ago";
    if (seconds < 172800) return (seconds / 3600).toFixed(1) + " h ago";
    return Math.round(seconds / 86400) + " d ago";
  }
  const tablePart = document.getElementById("node-table-part");
  let tableAsked = 0;
  function loadTable(search) {
    if (!tablePart) return;
    const asked = ++tableAsked;
    fetch("/fleet/nodes" + search, { headers: { Accept: "text/html" } }).then(function (r) {
      return r.text().then(function (body) { return { ok: r.ok, body: body }; });
    }).then(function (r) {
      if (asked !== tableAsked) return;  // a newer one is on its way
      if (!r.ok) { tablePart.replaceChildren(Object.assign(document.createElement("p"), { className: "error", textContent: "The node table could not be read: reload the page." })); return; }
      tablePart.innerHTML = r.body;
      nodeRows();
      tablePart.dispatchEvent(new CustomEvent("yardstick:table", { bubbles: true }));
    });
  }
  if (tablePart) tablePart.addEventListener("click", function (e) {
    const a = e.target.closest("a[data-sort], a[data-page-link]");
    if (!a || e.metaKey || e.ctrlKey || e.shiftKey) return;
    e.preventDefault();
    const url = new URL(a.getAttribute("href"), location.href);
    history.pushState(null, "", url);
    loadTable(url.search);
  });
  const search = document.getElementById("node-search");
  if (search) search.addEventListener("submit", function (e) {
    e.preventDefault();
    const url = new URL(location.href);
    const q = search.querySelector('input[name="q"]').value.trim();
    if (q) url.searchParams.set("q", q); else url.searchParams.delete("q");
    url.searchParams.delete("page");
    history.pushState(null, "", url);
    loadTable(url.search);
  });

  // Today's cost and IPD, as the attribute task computed them (the "costs" event).
  Y.on("costs", function (ev) {
    const f = ev.data.fleet;
    if (!f) return;
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
    ["generation", "training", "evaluation"].forEach(function (k) {
      if (f[k + "_display"] !== undefined) text("card-" + k + "-usd", f[k + "_display"]);
    });
    text("card-ipd-as-of", Y.hhmm(f.as_of));
  });
  // The cards as dashboard.fleetstate.compute counts them, for the page and the frames alike.
  function fleetCards(c) {
    text("card-busy", c.busy);
    text("card-idle", c.idle);
    text("card-stale", c.stale);
    text("card-devices", c.devices);
    text("card-power", Number(c.power_kw).toFixed(2));
    if (c.burn_usd_per_h !== undefined) text("card-burn", Y.usd(c.burn_usd_per_h));
    const stale = document.getElementById("card-stale");
    if (stale) stale.closest(".card").classList.toggle("stat-warn", c.stale > 0);
    const unhealthy = document.getElementById("card-unhealthy");
    if (unhealthy && c.unhealthy !== undefined) {
      unhealthy.textContent = c.unhealthy;
      unhealthy.closest(".card").classList.toggle("stat-warn", c.unhealthy > 0);
    }
  }

  // Start from what the page was rendered with.
  const start = document.getElementById("fleet-start");
  if (start) {
    const s = JSON.parse(start.textContent);
    setLayout(s.layout);
    const raw = atob(s.frame), buf = new Uint8Array(raw.length);
    for (let i = 0; i < raw.length; i++) buf[i] = raw.charCodeAt(i);
    applyFrame(buf.buffer);
  }
  syncControls();
  // The cards, lists and node table now; the heatmap once plotly.js has run, which is asked for at the first
  // frame from the socket (above), or now on a paused page, or after PLOTLY_AFTER_MS whatever the socket does.
  draw();
  if (!window.Plotly) Y.whenPlotly(draw);
  if (!Y.root.dataset.topics) Y.loadPlotly();
  else setTimeout(Y.loadPlotly, PLOTLY_AFTER_MS);
})();
