// Fleet page: the cards (the unhealthy count among them), the heatmap, the power chart and the node
// table's ages follow the telemetry broadcaster's "samples" events; today's cost and IPD card follows the
// "costs" events.
(function () {
  "use strict";
  const Y = window.Yardstick;
  if (!Y || Y.page !== "fleet") return;
  const figs = Y.figs, text = Y.text;
  Y.resumeTopics = "fleet,costs";

  // Recount the cards, recolour the heatmap cells that changed, extend the power chart, recount power.
  Y.on("samples", function (ev) {
    const d = ev.data;
    if (d.cards) fleetCards(d.cards);
    newestSamples(d);
    nodeRows(d);
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
  });

  // The node table's "Util now" and "Power now": each node's reporting devices at their newest samples,
  // as the cards count them. Rendered from [index, util, power] per reporting device; a live sample
  // replaces its device's, a stale device leaves the mean and the sum.
  const reporting = {};
  document.querySelectorAll("#node-table tr[data-devices]").forEach(function (tr) {
    reporting[tr.dataset.node] = {};
    JSON.parse(tr.dataset.devices).forEach(function (dev) {
      reporting[tr.dataset.node][dev[0]] = { util: dev[1], power: dev[2] };
    });
  });
  function nodeRows(d) {
    const changed = {};
    d.devices.forEach(function (s) {
      if (!reporting[s.node]) return;
      reporting[s.node][s.index] = { util: s.util_pct, power: s.power_w };
      changed[s.node] = true;
    });
    (d.stale || []).forEach(function (cell) {
      if (reporting[cell[0]] && reporting[cell[0]][cell[1]]) {
        delete reporting[cell[0]][cell[1]];
        changed[cell[0]] = true;
      }
    });
    Object.keys(changed).forEach(function (node) {
      const devices = Object.values(reporting[node]);
      const utils = devices.map(function (v) { return v.util; }).filter(function (u) { return u !== null; });
      const power = devices.reduce(function (sum, v) { return sum + (v.power === null ? 0 : v.power); }, 0);
      const tr = document.querySelector('#node-table tr[data-node="' + CSS.escape(node) + '"]');
      tr.querySelector(".node-util").textContent = utils.length
        ? Math.round(utils.reduce(function (a, b) { return a + b; }, 0) / utils.length) + "%" : "—";
      tr.querySelector(".node-power").textContent =
        power.toLocaleString("en-US", { maximumFractionDigits: 0 }) + " W";  // the template's num:0
    });
  }

  // The node table's "Newest sample" ages with the clock, and a node's new sample resets it. Ages are
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
  setInterval(showAges, 1000);
  // The template filter `age`.
  function age(seconds) {
    seconds = Math.max(0, seconds);
    if (seconds < 90) return Math.round(seconds) + " s ago";
    if (seconds < 5400) return Math.round(seconds / 60) + " min ago";
    if (seconds < 172800) return (seconds / 3600).toFixed(1) + " h ago";
    return Math.round(seconds / 86400) + " d ago";
  }

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
    text("card-ipd-as-of", Y.hhmm(f.as_of));
  });
  // The cards as dashboard.readings.fleet_cards counts them, for the page and the broadcaster alike.
  function fleetCards(c) {
    text("card-busy", c.busy);
    text("card-idle", c.idle);
    text("card-stale", c.stale);
    text("card-devices", c.devices);
    if (c.burn_usd_per_h !== undefined) text("card-burn", Y.usd(c.burn_usd_per_h));
    const stale = document.getElementById("card-stale");
    if (stale) stale.closest(".card").classList.toggle("stat-warn", c.stale > 0);
    // The count only: which devices, and why, are marked in the node table and the heatmap as rendered.
    const unhealthy = document.getElementById("card-unhealthy");
    if (unhealthy && c.unhealthy !== undefined) {
      unhealthy.textContent = c.unhealthy;
      unhealthy.closest(".card").classList.toggle("stat-warn", c.unhealthy > 0);
    }
  }
})();
