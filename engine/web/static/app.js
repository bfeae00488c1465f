// apollo serve's live pages: one EventSource per page (the URL is the
// body's data-sse), whose events change the page in place. Text always
// goes in through textContent, never as HTML.
"use strict";

(function () {
  const url = document.body.dataset.sse;
  if (!url || !window.EventSource) return;
  const live = document.getElementById("live");
  const es = new EventSource(url);
  es.onopen = () => live && live.classList.add("on");
  es.onerror = () => live && live.classList.remove("on");

  function setClass(el, prefix, cls) {
    for (const c of Array.from(el.classList)) if (c.startsWith(prefix)) el.classList.remove(c);
    el.classList.add(cls);
  }
  function text(el, s) { if (el && el.textContent !== s) el.textContent = s; }

  // The runs page: update a row, or add one for a new run.
  es.addEventListener("runs", (ev) => {
    const tbody = document.querySelector("#runs tbody");
    if (!tbody) return;
    for (const it of JSON.parse(ev.data)) {
      let row = tbody.querySelector('tr[data-key="' + CSS.escape(it.key) + '"]');
      if (it.gone) { if (row) row.remove(); continue; }
      const r = it.run;
      if (!row) {
        if (document.location.search.includes("page=") && !document.location.search.includes("page=0")) continue;
        row = document.createElement("tr");
        row.dataset.key = it.key;
        for (const cls of ["task", "pipeline", "status", "started", "duration", "steps"]) {
          const td = document.createElement("td");
          td.className = cls;
          row.appendChild(td);
        }
        const a = document.createElement("a");
        a.href = it.link;
        a.textContent = r.task_id;
        row.cells[0].appendChild(a);
        row.cells[3].textContent = r.started_at.replace("T", " ").replace(/\.\d+Z$/, "Z");
        tbody.insertBefore(row, tbody.firstChild);
      }
      text(row.cells[1], r.task_name);
      const cell = row.querySelector("td.status") || row.cells[2];
      let badge = cell.querySelector(".badge");
      if (!badge) { cell.textContent = ""; badge = document.createElement("span"); cell.appendChild(badge); }
      badge.className = "badge s-" + r.status;
      text(badge, r.status + (r.pid ? " (pid " + r.pid + ")" : ""));
      text(row.querySelector("td.duration") || row.cells[4], fmtDur(r.duration_ms));
      const s = r.steps;
      text(row.querySelector("td.steps") || row.cells[5], s.done + "/" + s.total + (s.failed ? ", " + s.failed + " failed" : "") + (s.running ? ", " + s.running + " running" : ""));
    }
  });

  function fmtDur(ms) {
    if (ms < 1000) return ms + "ms";
    const s = ms / 1000;
    if (s < 60) return s.toFixed(1) + "s";
    const m = Math.floor(s / 60);
    if (m < 60) return m + "m" + String(Math.floor(s % 60)).padStart(2, "0") + "s";
    return Math.floor(m / 60) + "h" + String(m % 60).padStart(2, "0") + "m";
  }

  // A run's page: step states in the graph and the table, the status, the
  // timeline.
  let ganttTimer = null;
  es.addEventListener("run", (ev) => {
    const d = JSON.parse(ev.data);
    const status = document.getElementById("status");
    if (status) { status.className = "badge s-" + d.status; text(status, d.status); }
    text(document.getElementById("runner"), d.runner.held ? "apollo process " + d.runner.pid + " holds the task" : "none");
    text(document.getElementById("records"), String(d.records));
    for (const st of d.steps || []) {
      const cls = "st-" + st.state.toLowerCase();
      for (const el of document.querySelectorAll('[data-step="' + CSS.escape(st.id) + '"]')) {
        if (el.closest("svg.gantt")) continue;
        setClass(el, "st-", cls);
        const badge = el.querySelector(".state .badge");
        if (badge) { badge.className = "badge " + cls; text(badge, st.state.toLowerCase()); }
        text(el.querySelector(".attempts"), String(st.attempts));
        text(el.querySelector(".duration"), st.duration);
        text(el.querySelector(".decision"), st.decision);
        text(el.querySelector(".lasterr"), st.last_error);
        const title = el.querySelector("title");
        if (title) text(title, st.id + " " + st.state.toLowerCase());
        const outs = el.querySelector(".outputs");
        if (outs && st.output && !outs.querySelector('a[href="' + CSS.escape(st.output) + '"]')) {
          const a = document.createElement("a");
          a.href = st.output;
          a.textContent = "#" + (st.attempts - 1);
          outs.insertBefore(a, outs.lastElementChild);
          outs.insertBefore(document.createTextNode(" "), outs.lastElementChild);
        }
      }
    }
    const gantt = document.getElementById("gantt");
    if (gantt && !ganttTimer) {
      ganttTimer = setTimeout(() => {
        ganttTimer = null;
        fetch(gantt.dataset.src, { credentials: "same-origin" }).then((r) => r.ok ? r.text() : null).then((svg) => {
          if (svg !== null) {
            const doc = new DOMParser().parseFromString(svg, "image/svg+xml");
            gantt.replaceChildren(document.importNode(doc.documentElement, true));
          }
        });
      }, 1000);
    }
  });

  // An attempt's page: append what the output gained.
  es.addEventListener("output", (ev) => {
    const pre = document.getElementById("output");
    if (!pre) return;
    const empty = document.getElementById("empty");
    if (empty) empty.remove();
    const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.appendChild(document.createTextNode(JSON.parse(ev.data)));
    if (atBottom) pre.scrollTop = pre.scrollHeight;
  });

  es.addEventListener("index", (ev) => {
    const d = JSON.parse(ev.data);
    const small = document.querySelector("h1 small");
    if (small && d.pending === 0 && small.textContent.includes("indexing")) small.textContent = small.textContent.replace(/ · indexing.*$/, "");
  });
})();
