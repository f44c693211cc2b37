// The campaign page. dashboard.js draws its figures and keeps the socket (topics campaign.<id>, jobs, costs);
// any event it hears that can change a figure makes this re-read the page's body (?part=body: the same
// template and figures, from the server) at most once a second, so no number is recomputed here.
(function () {
  "use strict";
  const root = document.querySelector('.page[data-page="campaign"]');
  if (!root) return;
  // What dashboard.js follows once live is turned on, when the page was paused on load.
  if (window.Yardstick) window.Yardstick.resumeTopics = "campaign." + root.dataset.campaign + ",jobs,costs";
  const config = { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
  const QUIET = new Set(["progress", "phase", "step", "samples"]); // they change no campaign figure
  let timer = null;
  // Paused on load: what dashboard.js follows once live is turned on.
  if (window.Yardstick) window.Yardstick.resumeTopics = "campaign." + root.dataset.campaign + ",jobs,costs";

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
      Plotly.newPlot(c, spec.data, spec.layout, config);
      c.dataset.drawn = "true";
    });
  }
  async function refresh() {
    timer = null;
    try {
      const url = new URL(location.href);
      url.searchParams.set("part", "body");
      const resp = await fetch(url, { cache: "no-store" });
      if (!resp.ok) return;
      document.getElementById("campaign-body").innerHTML = await resp.text();
      draw();
      root.dataset.refreshed = String(Number(root.dataset.refreshed || 0) + 1);
    } catch (e) { /* the next event tries again */ }
  }
  document.addEventListener("yardstick:event", function (e) {
    if (QUIET.has(e.detail.kind)) return;
    if (!timer) timer = setTimeout(refresh, 1000); // "subscribed" too: catch up on what came before it
  });
})();
