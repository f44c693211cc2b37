// A page whose body the server redraws: the campaign and sweep pages (data-live-body: the body's element id,
// data-live-topics: what it follows, e.g. campaign.<id>,jobs,costs). dashboard.js keeps the socket; any event it
// hears that can change a figure makes this re-read the page's body (?part=body: the same template and figures,
// from the server) at most once a second, so no number is recomputed here. This draws the body's figures.
(function () {
  "use strict";
  const root = document.querySelector(".page[data-live-body]");
  if (!root) return;
  const config = { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
  const QUIET = new Set(["progress", "phase", "step", "samples"]); // they change no figure of these pages
  let timer = null;
  // Paused on load: what dashboard.js follows once live is turned on.
  if (window.Yardstick) window.Yardstick.resumeTopics = root.dataset.liveTopics;

  function draw() {
    const el = document.getElementById("figures");
    const specs = el ? JSON.parse(el.textContent) : {};
    document.querySelectorAll(".chart[data-fig]").forEach(function (c) {
      const spec = specs[c.dataset.fig];
      if (!spec || !window.Plotly) return;
      if (spec.empty) {
        const p = document.createElement("p");
        p.className = "chart-empty"; p.setAttribute("role", "status"); p.textContent = spec.empty;
        c.replaceChildren(p); c.dataset.drawn = "empty"; return;
      }
      c.replaceChildren();
      Plotly.newPlot(c, spec.data, spec.layout, config).then(function () {
        if (window.Yardstick && window.Yardstick.fitLegend) window.Yardstick.fitLegend(c);
      });
      c.dataset.drawn = "true";
    });
  }
  async function refresh() {
    timer = null;
    // Not while someone types into a form of the body (the budget's): its value would be drawn over. Later.
    const active = document.activeElement;
    const body = document.getElementById(root.dataset.liveBody);
    if (active && body && body.contains(active) && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName)) {
      timer = setTimeout(refresh, 1000);
      return;
    }
    try {
      const url = new URL(location.href);
      url.searchParams.set("part", "body");
      const resp = await fetch(url, { cache: "no-store" });
      if (!resp.ok) return;
      document.getElementById(root.dataset.liveBody).innerHTML = await resp.text();
      draw();
      root.dataset.refreshed = String(Number(root.dataset.refreshed || 0) + 1);
    } catch (e) { /* the next event tries again */ }
  }
  document.addEventListener("yardstick:event", function (e) {
    if (QUIET.has(e.detail.kind)) return;
    if (!timer) timer = setTimeout(refresh, 1000); // "subscribed" too: catch up on what came before it
  });
})();
