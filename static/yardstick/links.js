// The MLflow client prints links into MLflow's own UI: <Yardstick>/#/experiments/<id>/runs/<run id>.
// A fragment never reaches the server, so follow it here, to the run's job page (tracking/views_links.py),
// on load and when only the fragment changes (the link pasted into a tab already on this page). Every page runs
// it, the login page too: a link opened with no session lands there (the fragment rides the redirect), goes on to
// /runs/<id>, whose own login asks next=/runs/<id>, so logging in ends on the job, not on the Fleet page.
(function () {
  function follow() {
    const m = window.location.hash.match(/^#\/experiments\/(\d+)(?:\/runs\/([0-9a-f]{32}))?/);
    if (m) window.location.replace(m[2] ? "/runs/" + m[2] : "/experiments/" + m[1]);
  }
  follow();
  window.addEventListener("hashchange", follow);
})();
