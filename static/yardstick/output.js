// A launched job's output on its page (dashboard/_launch_output.html), as the server keeps it (launch/views.py):
// the newest lines on load, then the lines of each "output" event on the job's topic; after a (re)connect, the
// lines missed meanwhile. The view follows the tail while it is scrolled to its bottom; scrolled up, it holds
// still and counts the new lines below ("N new lines — jump to latest"). The line being written now (a progress
// bar, the event's `partial`) is its last line. Search asks the server for every kept line containing the text;
// clearing it returns to the live tail. Stderr and Yardstick's own lines are marked in words as well as colour.
(function () {
  "use strict";
  const Y = window.Yardstick;
  const box = document.getElementById("output");
  if (!Y || !box) return;
  const id = box.dataset.job;
  const api = "/api/jobs/" + id + "/output";
  const view = document.getElementById("output-lines");
  const partialBox = document.getElementById("output-partial");
  const note = document.getElementById("output-loading");
  const results = document.getElementById("output-results");
  const jump = document.getElementById("output-jump");
  const stateEl = document.getElementById("output-state");
  const countEl = document.getElementById("output-count");
  const markerEl = document.getElementById("output-marker");
  const form = document.getElementById("output-search");
  const q = document.getElementById("output-q");
  const clear = document.getElementById("output-clear");
  const PAGE = 1000;  // lines one fetch asks for
  const KEEP = 5000;  // lines the view keeps while it follows; the older ones are in the search and the download
  const HOLD_MAX = 20000;  // while paused it keeps more, so the lines someone reads do not move, up to this
  const RESULTS = 500;  // matches one search asks for

  let last = 0;  // the newest line in the view (its number)
  let newest = Number(box.dataset.last) || 0;  // the newest line the server has said it keeps
  let dropped = Number(box.dataset.dropped) || 0;
  let following = true, unseen = 0;
  let ready = false;
  const early = [];  // events that came before the first page
  let chain = Promise.resolve();  // fetches of lines, one at a time, in order
  let searching = "", matches = 0, searchToken = 0;
  let capped = false;  // the search found more than one page of matches: the newest are listed
  let around = 0;  // the line shown in context, in place of the matches (kept in `saved` meanwhile)
  const saved = document.createDocumentFragment();

  const STREAM_MARK = { stderr: "err", yardstick: "◆" };
  const STREAM_NAME = { stdout: "stdout", stderr: "stderr", yardstick: "Yardstick's own line" };

  function lineEl(l, query) {
    const div = document.createElement("div");
    div.className = "line";
    div.dataset.stream = l[1];
    if (l[0] !== null) div.dataset.seq = l[0];
    const ln = document.createElement("span");
    ln.className = "ln";
    ln.textContent = l[0] === null ? "" : l[0];
    const st = document.createElement("span");
    st.className = "st";
    st.textContent = STREAM_MARK[l[1]] || "";
    st.title = STREAM_NAME[l[1]] || l[1];
    const tx = document.createElement("span");
    tx.className = "tx";
    if (query) highlight(tx, l[2], query); else tx.textContent = l[2];
    div.append(ln, st, tx);
    return div;
  }
  // The text with each place it contains `query` (any case, as the server's search) in a <mark>.
  function highlight(el, text, query) {
    const low = text.toLowerCase(), needle = query.toLowerCase();
    let at = 0;
    for (;;) {
      const i = low.indexOf(needle, at);
      if (i < 0 || !needle) break;
      el.append(text.slice(at, i));
      const m = document.createElement("mark");
      m.textContent = text.slice(i, i + needle.length);
      el.append(m);
      at = i + needle.length;
    }
    el.append(text.slice(at));
  }
  function contains(text) { return text.toLowerCase().includes(searching.toLowerCase()); }
  // A match in the results: its number is a button that shows the lines around it.
  function matchEl(l, query) {
    const el = lineEl(l, query);
    const ln = el.querySelector(".ln");
    const b = document.createElement("button");
    b.type = "button";
    b.className = "ln ln-link";
    b.textContent = l[0];
    b.title = "show the lines around line " + l[0];
    b.setAttribute("aria-label", "show line " + l[0] + " in context");
    ln.replaceWith(b);
    return el;
  }

  function atBottom() { return view.scrollHeight - view.scrollTop - view.clientHeight <= 4; }
  function toBottom() { view.scrollTop = view.scrollHeight; }
  function shownLines() { return view.querySelectorAll(":scope > .line"); }

  // Append the lines newer than the newest shown: the view moves with them only while it follows.
  function add(lines) {
    const fresh = lines.filter(function (l) { return l[0] > last; });
    if (!fresh.length) return 0;
    const frag = document.createDocumentFragment();
    fresh.forEach(function (l) { frag.append(lineEl(l)); });
    view.insertBefore(frag, partialBox);
    last = fresh[fresh.length - 1][0];
    newest = Math.max(newest, last);
    if (searching) {
      fresh.forEach(function (l) {
        if (contains(l[2])) { (around ? saved : results).append(matchEl(l, searching)); matches += 1; }
      });
      if (matches && !around) sayMatches();
    }
    trim();
    if (following) toBottom(); else unseen += fresh.length;
    note.hidden = !note.dataset.before;
    showState();
    return fresh.length;
  }
  // Let go of the oldest lines in the view past KEEP (past HOLD_MAX while paused, keeping the lines in sight still).
  function trim() {
    const lines = shownLines();
    const over = lines.length - (following ? KEEP : HOLD_MAX);
    if (over <= 0) return;
    const before = view.scrollHeight;
    for (let i = 0; i < over; i++) lines[i].remove();
    if (!following) view.scrollTop -= before - view.scrollHeight;
    const oldest = shownLines()[0];
    sayBefore(oldest ? Number(oldest.dataset.seq) : last + 1);
  }
  function sayBefore(seq) {
    const earlier = seq - 1 - dropped;
    note.dataset.before = earlier > 0 ? "1" : "";
    note.textContent = earlier > 0 ? earlier.toLocaleString() + " earlier line" + (earlier === 1 ? "" : "s") +
      " kept but not shown here: search them, or download the whole log." : "";
    note.hidden = earlier <= 0;
  }
  function counts(d) {
    if (d.dropped !== undefined && d.dropped !== null) dropped = d.dropped;
    if (d.last !== undefined) newest = Math.max(newest, d.last);
    const kept = Math.max(0, newest - dropped);
    countEl.textContent = kept.toLocaleString() + " line" + (kept === 1 ? "" : "s") + " kept";
    if (d.marker) { markerEl.textContent = d.marker; markerEl.hidden = false; }
  }
  function showState() {
    if (searching) { jump.hidden = true; return; }
    jump.hidden = following;
    jump.textContent = unseen ? unseen.toLocaleString() + " new line" + (unseen === 1 ? "" : "s") + " — jump to latest"
      : "Jump to latest";
    stateEl.textContent = following ? "Following the newest line."
      : "Paused while you read: new lines wait below" + (unseen ? " (" + unseen.toLocaleString() + ")" : "") + ".";
  }
  function setPartial(partial) {
    partialBox.replaceChildren();
    ["stdout", "stderr"].forEach(function (s) {
      if (!partial[s]) return;
      const el = lineEl([null, s, partial[s]]);
      el.classList.add("partial");
      el.title = "the line being written now (a progress bar is redrawn in place)";
      el.querySelector(".ln").textContent = "⟳";
      partialBox.append(el);
    });
    if (following && !searching) toBottom();
  }

  async function get(query) {
    const resp = await fetch(api + "?" + query, { cache: "no-store" });
    if (!resp.ok) return null;
    return resp.json();
  }
  // The newest page, in place of whatever the view held (on load, or when too far behind to fetch the gap).
  async function loadNewest() {
    const body = await get("limit=" + PAGE);
    if (!body) { note.textContent = "The output could not be read: reload the page to try again."; return; }
    shownLines().forEach(function (el) { el.remove(); });
    last = 0;
    counts(body);
    add(body.lines);
    sayBefore(body.lines.length ? body.lines[0][0] : body.last + 1);
    if (!body.lines.length) { note.textContent = "No output yet."; note.hidden = false; }
    following = true; unseen = 0;
    toBottom();
    showState();
    if (!ready) {
      ready = true;
      early.splice(0).forEach(onOutput);
    }
  }
  // The lines after the newest shown, a page at a time (after a reconnect, or a gap in the events).
  function queue(fn) {
    chain = chain.then(fn).catch(function () { /* the server did not answer: the next catch-up asks again */ });
    return chain;
  }
  function fetchAfter() {
    return queue(async function () {
      if (!ready) { await loadNewest(); return; }  // the first page never came: that first
      for (let i = 0; i < 50; i++) {
        const body = await get("after=" + last + "&limit=" + PAGE);
        if (!body) return;
        if (body.last - last > KEEP) { await loadNewest(); return; }
        counts(body);
        add(body.lines);
        if (body.lines.length < PAGE) return;
      }
    });
  }
  function onOutput(d) {
    if (!ready) { early.push(d); return; }
    const lines = d.lines || [];
    if (lines.length && lines[0][0] > last + 1) fetchAfter(); // some were missed: fetch them all, these included
    else add(lines);
    counts({ dropped: d.dropped, marker: d.marker, last: lines.length ? lines[lines.length - 1][0] : undefined });
    setPartial(d.partial || {});
  }

  Y.on("output", function (ev) {
    if (ev.topic !== "job." + id) return;
    onOutput(ev.data);
    // The worker writes the argv it runs just before the first line ("started on ..."): the card shows it now.
    const card = document.getElementById("launch-card");
    if (card && document.getElementById("launch-argv-none") && !card.dataset.asked) {
      card.dataset.asked = "1";
      Y.swapPart("#launch-card", "/jobs/" + id + "/part/launch");
    }
  });
  // A cluster's scheduler said something new of it (Slurm: PENDING with its reason, then RUNNING, its allocation).
  Y.on("launch", function (ev) {
    if (ev.topic !== "job." + id || !document.getElementById("launch-card")) return;
    Y.swapPart("#launch-card", "/jobs/" + id + "/part/launch");
  });
  Y.on("status", function (ev) {
    if (String(ev.data.id) !== id) return;
    if (["completed", "failed", "stopped", "budget_exhausted"].indexOf(ev.data.status) >= 0) setPartial({});
    const card = document.getElementById("launch-card");
    if (card && card.dataset.status !== ev.data.status) {
      card.dataset.status = ev.data.status;
      Y.swapPart("#launch-card", "/jobs/" + id + "/part/launch");
    }
  });
  queue(loadNewest);
  // After each (re)connect: what was written while the socket was not listening (queued after the first page).
  Y.onCatchUp(fetchAfter);

  view.addEventListener("scroll", function () {
    if (searching) return;
    const bottom = atBottom();
    if (bottom === following) return;
    following = bottom;
    if (following) { unseen = 0; trim(); }
    showState();
  });
  jump.addEventListener("click", function () {
    following = true; unseen = 0;
    toBottom();
    trim();
    showState();
    view.focus();
  });

  // -- search: every kept line, on the server --------------------------------------------------
  function sayMatches() {
    const what = capped ? "The newest " + matches.toLocaleString() + " kept lines that contain “" + searching + "” are listed"
      : matches.toLocaleString() + " kept line" + (matches === 1 ? " contains" : "s contain") + " “" + searching + "”";
    stateEl.textContent = what + "; new ones join as they arrive. Clear the search to return to the live output.";
  }
  async function search(text) {
    const token = ++searchToken;
    searching = text;
    around = 0;
    saved.replaceChildren();
    const body = await get("q=" + encodeURIComponent(text) + "&limit=" + RESULTS);
    if (token !== searchToken) return;
    if (!body) { stateEl.textContent = "The search failed: try again."; return; }
    results.replaceChildren();
    matches = 0;
    body.lines.forEach(function (l) { results.append(matchEl(l, text)); matches += 1; });
    // Lines that arrived while the search ran are in the view; those the server had not kept yet join too.
    shownLines().forEach(function (el) {
      const seq = Number(el.dataset.seq);
      if (seq > (body.lines.length ? body.lines[body.lines.length - 1][0] : body.last) && contains(el.querySelector(".tx").textContent)) {
        results.append(matchEl([seq, el.dataset.stream, el.querySelector(".tx").textContent], text));
        matches += 1;
      }
    });
    if (!matches) {
      const p = document.createElement("p");
      p.className = "output-note muted";
      p.textContent = "No kept line contains “" + text + "”.";
      results.append(p);
    }
    view.hidden = true;
    results.hidden = false;
    clear.hidden = false;
    jump.hidden = true;
    capped = body.lines.length === RESULTS;
    if (matches) sayMatches();
    else stateEl.textContent = "No kept line contains “" + text + "”. Clear the search to return to the live output.";
    results.scrollTop = results.scrollHeight;
  }
  function endSearch() {
    searchToken += 1;
    searching = "";
    around = 0;
    saved.replaceChildren();
    matches = 0;
    results.hidden = true;
    results.replaceChildren();
    view.hidden = false;
    clear.hidden = true;
    if (following) toBottom();
    showState();
  }
  // A match's number: the lines around it (fetched from the server), the match marked; "Back" returns to the matches.
  const CONTEXT = 30;
  results.addEventListener("click", async function (e) {
    const b = e.target.closest("button.ln-link, button.output-back");
    if (!b) return;
    if (b.classList.contains("output-back")) { backToMatches(); return; }
    const seq = Number(b.closest(".line").dataset.seq);
    const token = searchToken;
    const body = await get("after=" + Math.max(0, seq - CONTEXT - 1) + "&limit=" + (2 * CONTEXT + 1));
    if (!body || token !== searchToken) return;
    if (!around) saved.replaceChildren.apply(saved, Array.from(results.childNodes));
    around = seq;
    const back = document.createElement("button");
    back.type = "button";
    back.className = "small output-back";
    back.textContent = "← Back to the matches";
    results.replaceChildren(back);
    body.lines.forEach(function (l) {
      const el = lineEl(l, searching);
      if (l[0] === seq) { el.classList.add("target"); el.setAttribute("aria-current", "true"); }
      results.append(el);
    });
    stateEl.textContent = "Lines " + body.lines[0][0] + "–" + body.lines[body.lines.length - 1][0] + " around line " + seq +
      ". Back returns to the matches; clear the search to return to the live output.";
    const target = results.querySelector(".line.target");
    if (target) target.scrollIntoView({ block: "center" });
    back.focus({ preventScroll: true });
  });
  function backToMatches() {
    const seq = around;
    around = 0;
    results.replaceChildren(saved);  // a fragment: its children move back
    sayMatches();
    const el = results.querySelector('.line[data-seq="' + seq + '"] button.ln-link');
    if (el) { el.scrollIntoView({ block: "center" }); el.focus(); }
  }
  form.addEventListener("submit", function (e) {
    e.preventDefault();
    const text = q.value.trim();
    if (text) search(text); else endSearch();
  });
  q.addEventListener("input", function () { if (!q.value && searching) endSearch(); });
  clear.addEventListener("click", function () { q.value = ""; endSearch(); q.focus(); });
})();
