// Node page: each device's charts grow with the broadcaster's "samples" events for this node (raw resolution only).
(function () {
  "use strict";
  const Y = window.Yardstick;
  if (!Y || Y.page !== "node") return;
  Y.resumeTopics = Y.root.dataset.liveTopic || "";

  Y.on("samples", function (ev) {
    const byUuid = {};
    ev.data.samples.forEach(function (s) { byUuid[s.uuid] = s; });
    Y.extend(function (t) {
      const s = byUuid[t.device];
      return s ? [s.ts, Y.metric(t.y, s)] : null;
    });
  });
})();
