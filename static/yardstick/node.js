// Node page: each device's charts grow with the broadcaster's "samples" events for this node (raw resolution only).
// A trace follows one device's field, the sum of several devices' (the node's NVLink total), or, on the timeline
// of why clocks were held down, marks its row when the device's clocks event reasons have its bits.
(function () {
  "use strict";
  const Y = window.Yardstick;
  if (!Y || Y.page !== "node") return;
  Y.resumeTopics = Y.root.dataset.liveTopic || "";

  Y.on("samples", function (ev) {
    const byUuid = {};
    ev.data.samples.forEach(function (s) { byUuid[s.uuid] = s; });
    Y.extend(function (t) {
      if (t.devices) {
        const here = t.devices.map(function (u) { return byUuid[u]; }).filter(Boolean);
        const values = here.map(function (s) { return Y.metric(t.y, s); }).filter(function (v) { return v !== null; });
        if (!values.length) return null;
        return [here[0].ts, values.reduce(function (a, v) { return a + v; }, 0)];
      }
      const s = byUuid[t.device];
      if (!s) return null;
      if (t.y.bits) {
        const reasons = s.clock_event_reasons;
        return [s.ts, reasons !== null && reasons !== undefined && (Number(reasons) & t.y.bits) ? t.y.row : null];
      }
      return [s.ts, Y.metric(t.y, s)];
    });
  });
})();
