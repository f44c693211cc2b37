// The MLflow client prints links into MLflow's own UI: <Yardstick>/#/experiments/<id>/runs/<run id>.
// A fragment never reaches the server, so follow it here, to the run's job page (tracking/views_links.py),
// on load and when only the fragment changes (the link pasted into a tab already on this page).
(function () {
  function follow() {
    const m = window.location.hash.match(/^#\/experiments\/(\d+)(?:\/runs\/([0-9a-f]{32}))?/);
    if (m) window.location.replace(m[2] ? "/runs/" + m[2] : "/experiments/" + m[1]);
  }
  follow();
  window.addEventListener("hashchange", follow);
})();
