// The Alerts page, live: its body (alerts, deliveries, rules) is fetched again when the "alerts" topic
// says something changed, and every POLL_MS in any case (the socket may be refused that topic or down).
// A refresh waits while a person is typing in one of its forms or has an edit form open.
(function () {
  "use strict";
  const POLL_MS = 5000;
  const body = document.getElementById("alerts-body");
  const state = document.getElementById("alerts-live");
  if (!body) return;
  let socketLive = false, busy = false;

  function say(s, text) { if (state) { state.dataset.state = s; state.textContent = text; } }

  function editing() {
    const el = document.activeElement;
    return (el && body.contains(el) && el.tagName === "INPUT") || !!body.querySelector("details[open]");
  }

  function refresh() {
    if (busy || editing()) return Promise.resolve();
    busy = true;
    return fetch(body.dataset.src, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.text(); })
      .then(function (html) {
        if (!editing()) body.innerHTML = html;
        say("live", socketLive ? "live" : "live (every " + POLL_MS / 1000 + " s)");
      })
      .catch(function () { say("error", "not live: the page could not be reloaded, retrying"); })
      .finally(function () { busy = false; });
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    let socket;
    try { socket = new WebSocket(scheme + location.host + "/ws/live?topics=alerts"); } catch (e) { return; }
    socket.onmessage = function (msg) {
      const ev = JSON.parse(msg.data);
      if (ev.kind === "subscribed") {
        socketLive = (ev.data.topics || []).indexOf("alerts") >= 0;
        say("live", socketLive ? "live" : "live (every " + POLL_MS / 1000 + " s)");
        return;
      }
      document.dispatchEvent(new CustomEvent("yardstick:event", { detail: ev }));
      refresh();
    };
    socket.onclose = function () { socketLive = false; setTimeout(connect, 10000); };
  }

  say("live", "live (every " + POLL_MS / 1000 + " s)");
  connect();
  setInterval(refresh, POLL_MS);
})();
