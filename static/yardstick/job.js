// Job page: the charts grow a step at a time ("step", "rewind" on a resume from an earlier checkpoint), the
// status, phase, controls, history and "Where it ran" follow the "jobs" events, the cost card and chart the
// "costs" events, the rollouts table the newest step; an external run's newly logged keys get charts.
(function () {
  "use strict";
  const Y = window.Yardstick;
  if (!Y || Y.page !== "job") return;
  const root = Y.root, figs = Y.figs, text = Y.text, num = Y.num, row = Y.row;
  const id = root.dataset.job;
  const mine = function (ev) { return ev.topic === "job." + id; };
  Y.resumeTopics = "job." + id + ",jobs,costs";

  // After a (re)connect: the steps after the last one shown, then the job's status as the API has it now.
  Y.onCatchUp(async function () {
    let after = root.dataset.lastStep === "" ? -1 : Number(root.dataset.lastStep);
    for (;;) {
      const resp = await fetch("/api/jobs/" + id + "/steps?after=" + after, { cache: "no-store" });
      if (!resp.ok) break;
      const body = await resp.json();
      if (after >= 0 && body.steps_done < after) {
        // Resumed from an earlier checkpoint while we were not listening: its steps run again.
        Y.run({ topic: "job." + id, kind: "rewind", data: { job: Number(id), through: body.steps_done } });
        after = body.steps_done;
        continue;
      }
      body.steps.forEach(function (s) { Y.run({ topic: "job." + id, kind: "step", data: { step: s.step, metrics: s.metrics } }); });
      Y.run({ topic: "jobs", kind: "status", data: { id: Number(id), status: body.status, phase: body.phase, steps_done: body.steps_done, can_stop: body.can_stop, can_resume: body.can_resume } });
      if (!body.steps.length || body.next_after === after) break;
      after = body.next_after;
    }
  });

  Y.on("step", function (ev) {
    if (!mine(ev)) return;
    const d = ev.data, m = d.metrics || {};
    if (root.dataset.lastStep !== "" && d.step <= Number(root.dataset.lastStep)) return; // already shown
    loggedKeys(m);
    Y.extend(function (t) { return [d.step, Y.metric(t.y, m)]; });
    root.dataset.lastStep = d.step;
    // Steps came, and a chart may still have no value of its own (the baseline is an eval alone).
    Object.values(figs).forEach(function (f) {
      if (!f.live || f.drawn || !f.spec.empty) return;
      f.spec.empty = d.step === 0 ? "No training step yet" : "Nothing to draw yet";
      Y.sayEmpty(f);
    });
    text("steps-done", d.step);
    stepsTotal(d.steps);
    const prog = document.getElementById("job-progress");
    if (prog) prog.value = d.step;
    if (m["train/reward_mean"] != null) text("reward-now", Number(m["train/reward_mean"]).toFixed(3));
    if (m["eval/pass1"] != null) text("pass1-now", Number(m["eval/pass1"]).toFixed(1));
    if (d.step === 0 && m["eval/pass1"] != null) text("baseline-pass1", num(m["eval/pass1"], 1));
    if (d.samples && d.samples.length) showSamples(d.step, d.samples);
  });
  // The run's total steps (Job.steps_total), once known: "step 29 of 100" and the bar. A run may log it after the
  // page was drawn (TRL's max_steps among its first params), so every event that carries it may show it.
  function stepsTotal(n) {
    if (!(n > 0)) return;
    text("steps-total", n);
    const of = document.getElementById("steps-of"), prog = document.getElementById("job-progress");
    const unknown = document.getElementById("steps-unknown");
    if (of) of.hidden = false;
    if (prog) { prog.max = n; prog.hidden = false; }
    if (unknown) unknown.hidden = true;
  }
  Y.on("progress", function (ev) { if (String(ev.data.id) === id) stepsTotal(ev.data.steps); });
  // An external run's generations (tracking/artifacts.py): the samples table follows the newest step.
  Y.on("rollouts", function (ev) { if (mine(ev)) showSamples(ev.data.step, ev.data.samples); });
  // Where the job runs: its stints, as Stint.to_dict gives them (the runner opens one; a status event ends it).
  Y.on("stints", function (ev) { if (mine(ev)) showStints(ev.data.stints); });
  Y.on("rewind", function (ev) { if (mine(ev)) rewindTo(Number(ev.data.through)); });
  Y.on("costs", function (ev) {
    (ev.data.jobs || []).forEach(function (j) {
      if (String(j.id) !== id) return;
      Y.shown(document.getElementById("job-cost"), j.cost_display, j.cost_title);
      Y.withUnit(document.getElementById("job-ipd"), j.points_per_usd === null ? null : j.ipd_display, "pts/$");
      text("job-ipd-hint", j.usd_per_point ? j.usd_per_point_display + " per point" : j.state);
      if (j.usd_per_million_tokens !== undefined) {
        text("job-usd-per-mtok", j.usd_per_million_tokens_display);
        text("job-tokens-hint", j.tokens_per_joule ? num(j.tokens_per_joule, 2) + " tokens/J" : j.tokens_state);
      }
      if (j.cost_curve) costCurve(j.cost_curve);
      if (j.base_build_text !== undefined) text("job-base-build", j.base_build_text);
      if (j.price_of_a_point) pricePoint(j.price_of_a_point);
    });
  });
  // The "Price of a point" card (dashboard/_price_of_a_point.html) as costs.tokens.decomposition gives it.
  function pricePoint(p) {
    ["usd_per_million_tokens:pp-per-mtok", "usd_per_point:pp-per-point", "generation_usd_per_million_tokens:pp-gen",
      "training_usd_per_million_trained_tokens:pp-train"].forEach(function (pair) {
      const [key, el] = pair.split(":");
      Y.shown(document.getElementById(el), p[key + "_display"], p[key + "_title"]);
    });
    text("pp-mtok-per-point", p.million_tokens_per_point_display);
    text("pp-model", p.device_model || "—");
    text("pp-tokens", num(p.rollout_tokens, 0));
    text("pp-cost", p.cost_display);
    text("pp-gain", p.gain_points === null ? "—" : num(p.gain_points, 2));
    const state = document.getElementById("pp-state");
    if (state) { state.textContent = p.state; state.hidden = p.state === "ok"; }
    text("pp-held", num(p.held_s, 0));
    const held = document.getElementById("pp-held-hint");
    if (held) held.hidden = !p.phases.length;
    const body = document.getElementById("pp-phases-body");
    if (!body) return;
    body.replaceChildren();
    if (!p.phases.length) {
      const tr = body.insertRow(), td = tr.insertCell();
      td.colSpan = 4; td.className = "muted"; td.id = "pp-no-split"; td.textContent = p.split_note || p.state;
      return;
    }
    p.phases.forEach(function (ph) {
      const tr = body.insertRow();
      tr.dataset.phase = ph.phase;
      [ph.label, num(ph.seconds, 0), ph.share_display, ph.usd_display].forEach(function (v, i) {
        const td = tr.insertCell();
        td.textContent = v;
        if (i) td.className = "num";
      });
    });
  }
  Y.on("status", function (ev) {
    const d = ev.data;
    if (String(d.id) !== id) return;
    const box = document.getElementById("job-status");
    if (box) box.innerHTML = Y.badge(d.status);
    Y.showControls(document, d);
    if (d.phase !== undefined) phase(ev);
    stepsTotal(d.steps);
    baseBuild(d);
    if (d.change) addHistory(d.change);
    if (d.stints) showStints(d.stints);
    // A message announced a status ("Job 3 is stopping."): once the job has another, it is no longer true.
    document.querySelectorAll(".messages li[data-while-status], #job-line[data-while-status]").forEach(function (li) {
      if (li.dataset.job === String(d.id) && li.dataset.whileStatus !== d.status) li.remove();
    });
    document.querySelectorAll(".messages").forEach(function (ul) { if (!ul.children.length) ul.remove(); });
  });
  // What the worker is doing now ("building the base policy ...", "training"); hidden when empty. A chart
  // with nothing to draw yet says it.
  function phase(ev) {
    const d = ev.data;
    const el = String(d.id) === id ? document.getElementById("job-phase") : null;
    if (!el) return;
    el.textContent = d.phase || "";
    el.hidden = !d.phase;
    Object.values(figs).forEach(function (f) { if (f.live && !f.drawn) Y.sayEmpty(f); });
    baseBuild(d);
  }
  // "includes the base-policy build now running" holds while the job's phase is the build's (data-while-phase):
  // once it is not (trained on, stopped, failed), the server says what holds now.
  function baseBuild(d) {
    const el = document.getElementById("job-base-build");
    if (String(d.id) !== id || !el || !el.dataset.whilePhase || d.phase === undefined) return;
    if ((d.phase || "").startsWith(el.dataset.whilePhase)) return;
    Y.swapPart("#job-base-build", "/jobs/" + id + "/part/base_build");
  }
  Y.on("phase", phase);

  // An external run: a logged key first seen live gets a line on its prefix's chart, a new chart for a new
  // prefix (dashboard.figures.metric_group's rule). Keys ingestion derives for the standard charts are left out.
  const derivedEl = document.getElementById("derived-keys");
  const derived = new Set(derivedEl ? JSON.parse(derivedEl.textContent) : []);
  const OTHER_GROUP = "other";
  function metricGroup(key) { const i = key.indexOf("/"); return i > 0 ? key.slice(0, i) : OTHER_GROUP; }
  function loggedKeys(m) {
    const box = document.getElementById("logged-charts");
    if (!box) return;
    const known = new Set();
    Object.values(figs).forEach(function (f) {
      if (f.live && f.live.group !== undefined) f.live.traces.forEach(function (t) { known.add(t.y.key); });
    });
    Object.keys(m).sort().forEach(function (key) {
      if (derived.has(key) || known.has(key)) return;
      known.add(key);
      const group = metricGroup(key);
      const f = figs["logged:" + group] || loggedChart(box, group);
      const i = f.spec.data.length;
      const trace = { type: "scatter", mode: "lines+markers", name: group === OTHER_GROUP ? key : key.slice(group.length + 1),
                      x: [], y: [], meta: key, marker: { size: 4 }, line: { width: 2 } };
      f.spec.data.push(trace);
      f.live.traces.push({ trace: i, y: { key: key }, skip_null: true });
      if (f.drawn) Plotly.addTraces(f.el, trace);
    });
  }
  function loggedChart(box, group) {
    const card = document.createElement("div");
    card.className = "card";
    const el = document.createElement("div");
    el.className = "chart"; el.dataset.fig = "logged:" + group; el.dataset.group = group;
    el.setAttribute("role", "img"); el.setAttribute("aria-label", "metrics logged under " + group + ", by step");
    card.append(el);
    // Charts in group order with "other" last, as the server renders them.
    const after = Array.from(box.querySelectorAll(".chart[data-group]")).find(function (c) {
      const g = c.dataset.group;
      return group !== OTHER_GROUP && (g === OTHER_GROUP || g > group);
    });
    box.insertBefore(card, after ? after.closest(".card") : null);
    const empty = document.getElementById("logged-empty");
    if (empty) empty.hidden = true;
    const title = group === OTHER_GROUP ? "Logged: unprefixed keys" : "Logged: " + group + "/";
    const spec = { data: [], layout: { title: { text: title, x: 0, xanchor: "left", font: { size: 15 } }, height: 300,
      margin: { l: 56, r: 16, t: 40, b: 48 }, hovermode: "x unified", showlegend: true, paper_bgcolor: "rgba(0,0,0,0)",
      font: { family: "system-ui, -apple-system, Segoe UI, sans-serif", size: 12, color: "#1d1d1b" },
      legend: { orientation: "h", yanchor: "top", y: -0.2, x: 0 }, colorway: ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#56B4E9", "#CC79A7", "#F0E442", "#000000"],
      xaxis: { title: { text: "step" }, gridcolor: "#e6e6e6", automargin: true }, yaxis: { gridcolor: "#e6e6e6", automargin: true } },
      live: { x: "step", group: group, traces: [] }, empty: "Nothing to draw yet" };
    const f = { el: el, live: spec.live, spec: spec };
    figs["logged:" + group] = f;
    Y.sayEmpty(f);
    return f;
  }

  // The step's kept rollouts replace the table's when the page follows the newest step (no ?step=).
  function showSamples(step, samples) {
    const section = document.getElementById("samples");
    const body = document.getElementById("samples-body");
    if (!section || !body || section.dataset.followLatest !== "true") return;
    body.replaceChildren.apply(body, samples.map(function (s) {
      return row([s.index, Y.code(s.prompt), Y.code(s.completion), num(s.reward, 2), num(s.advantage, 3), s.tool_calls],
                 [null, null, null, "num", "num", "num"]);
    }));
    const pick = document.getElementById("step-pick");
    if (pick) {
      pick.value = step; pick.max = step;
      if (pick.min === "") pick.min = step;
      text("samples-range", "steps " + pick.min + "–" + step + " kept rollouts");
    }
  }
  function addHistory(c) {
    const body = document.getElementById("history-body");
    if (!body) return;
    const to = document.createElement("td");
    to.innerHTML = Y.badge(c.to);
    body.append(row([Y.utc(c.at), c.from || "—", to, c.reason]));
  }
  function showStints(stints) {
    const body = document.getElementById("stints-body");
    if (!body || !stints.length) return;
    body.replaceChildren.apply(body, stints.map(function (s) {
      const ended = s.ended_at ? Y.utc(s.ended_at) + " " + s.end_reason : "running";
      return row([s.node, s.device_name || s.device, Y.utc(s.started_at), ended,
                  s.first_step + "–" + (s.last_step === null ? "" : s.last_step)]);
    }));
  }
  // The cost/IPD chart's points, as the "costs" event carries them (costs.intelligence.ipd_curve).
  function costCurve(c) {
    const f = figs.cost;
    if (!f || !c.step.length) return;
    if (!f.drawn) {
      f.spec.data[0].x = c.step; f.spec.data[0].y = c.usd;
      f.spec.data[1].x = c.step; f.spec.data[1].y = c.ipd;
      Y.draw(f);
      return;
    }
    Plotly.restyle(f.el, { x: [c.step, c.step], y: [c.usd, c.ipd] }, [0, 1]);
  }

  // The job resumed from its checkpoint at step k, so steps after k run again: drop their points.
  function rewindTo(k) {
    Y.dropQueuedAfter(k);
    Object.values(figs).forEach(function (f) {
      if (!f.live || !f.drawn) return;
      const xs = [], ys = [], idx = [];
      f.live.traces.forEach(function (t) {
        const trace = f.el.data[t.trace];
        if (!trace || !trace.x) return;
        const keep = Array.from(trace.x, function (x) { return Y.xValue(x) <= k; });
        if (keep.every(Boolean)) return;
        xs.push(Array.from(trace.x).filter(function (_, i) { return keep[i]; }));
        ys.push(Array.from(trace.y).filter(function (_, i) { return keep[i]; }));
        idx.push(t.trace);
      });
      if (idx.length) Plotly.restyle(f.el, { x: xs, y: ys }, idx);
    });
    root.dataset.lastStep = k < 0 ? "" : k;
    text("steps-done", Math.max(k, 0));
    const prog = document.getElementById("job-progress");
    if (prog) prog.value = Math.max(k, 0);
  }
})();
