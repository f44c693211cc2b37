// Header health dots: poll /healthz and colour each part (shape and text too, for colour-blind users).
(function () {
  const box = document.getElementById("health");
  if (!box) return;
  async function refresh() {
    let body = null;
    try {
      const resp = await fetch("/healthz", { headers: { Accept: "application/json" }, cache: "no-store" });
      body = await resp.json();
    } catch (err) {
      body = null;
    }
    box.querySelectorAll(".dot").forEach(function (dot) {
      const check = body && body.checks[dot.dataset.check];
      const ok = !!(check && check.ok);
      dot.classList.toggle("ok", ok);
      dot.classList.toggle("bad", !ok);
      dot.title = dot.dataset.check + ": " + (check ? check.detail : "health check unreachable");
      dot.setAttribute("aria-label", dot.title);
    });
    box.dataset.ok = body && body.ok ? "true" : "false";
  }
  refresh();
  setInterval(refresh, 10000);
})();
