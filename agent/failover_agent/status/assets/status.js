// The failover-agent status page: fetches status.json as often as it says ("refresh") and updates the page
// in place (never reloads). Hand-written, no library: every element is built once per check
// and then only its text, classes and chart change. Data goes into textContent only.
"use strict";
(() => {
  let refreshMs = 2000; // until the agent says (status.json "refresh")
  const BARS = 90;
  const SVG = "http://www.w3.org/2000/svg";
  const views = new Map(); // check key -> its elements
  let updates = 0;
  let lastGood = null;

  const el = (tag, cls, parent) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (parent) parent.appendChild(e);
    return e;
  };
  const plural = (n, word) => `${n} ${n === 1 ? word : word + "s"}`;
  const span = (seconds) => {
    const s = Math.max(0, Math.round(seconds));
    if (s < 90) return plural(s, "second");
    if (s < 90 * 60) return plural(Math.round(s / 60), "minute");
    if (s < 48 * 3600) return plural(Math.round(s / 3600), "hour");
    return plural(Math.round(s / 86400), "day");
  };
  const ago = (seconds) => (seconds < 1 ? "just now" : `${span(seconds)} ago`);
  // The same, in units' symbols, for the narrow uptime column ("40.0 % over 19 s").
  const brief = (seconds) => {
    const s = Math.max(0, Math.round(seconds));
    if (s < 90) return `${s} s`;
    if (s < 90 * 60) return `${Math.round(s / 60)} min`;
    if (s < 48 * 3600) return `${Math.round(s / 3600)} h`;
    return `${Math.round(s / 86400)} d`;
  };
  // Times in UTC, 24-hour, said so: the page is read in other time zones than the agent's.
  const iso = (t) => new Date(t * 1000).toISOString(); // 2026-12-04T22:45:45.782Z
  const day = (t) => iso(t).slice(0, 10);
  const clock = (t) => `${iso(t).slice(11, 19)} UTC`;
  const stamp = (t) => `${day(t)} ${iso(t).slice(11, 19)} UTC`;
  const when = (t, now) => (now - t > 20 * 3600 ? stamp(t) : clock(t));
  const ms = (s) => `${Math.round(s * 1000)} ms`;
  // One precision (0.1 %), rounded down: 99.96 % of successes is not shown as 100.0 %.
  const pct = (v) => `${(Math.floor(v * 1000) / 10).toFixed(1)} %`;
  // A window's uptime and the time its results cover (null: the whole window, or no figure).
  const uptimeOf = (h, name) => {
    const v = h && h.uptime[name];
    if (v === null || v === undefined) return ["—", null]; // no result, or none older than the shorter window
    const covered = h.covered && h.covered[name];
    return [pct(v), covered === null || covered === undefined ? null : `over ${brief(covered)}`];
  };
  const host = (url) => (url || "").replace(/^[a-z]+:\/\//, "");
  // A result during a maintenance window: its label starts with this word (status/recorder.py).
  const inMaintenance = (r) => typeof r[3] === "string" && r[3].startsWith("maintenance");

  function view(key, parent, pool) {
    let v = views.get(key);
    if (v) return v;
    v = {};
    v.root = el("div", pool ? "check pool" : "check", parent);
    v.root.dataset.key = key;
    const who = el("div", "", v.root);
    const line = el("div", "", who);
    v.name = el(pool ? "h2" : "span", "name", line);
    v.badge = el("span", "badge", line);
    v.state = el("div", "detail", who);
    v.detail = el("div", "detail", who);
    v.checked = el("div", "detail", who);
    const hist = el("div", "", v.root);
    v.bars = el("div", "bars", hist);
    v.cells = [];
    for (let i = 0; i < BARS; i++) v.cells.push(el("span", "", v.bars));
    v.svg = document.createElementNS(SVG, "svg");
    v.svg.setAttribute("class", "chart");
    v.svg.setAttribute("viewBox", `0 0 ${BARS} 30`);
    v.svg.setAttribute("preserveAspectRatio", "none");
    v.line = document.createElementNS(SVG, "polyline");
    v.svg.appendChild(v.line);
    v.marks = document.createElementNS(SVG, "g");
    v.svg.appendChild(v.marks);
    hist.appendChild(v.svg);
    v.scale = el("div", "scale", hist);
    v.uptime = el("div", "uptime", v.root);
    views.set(key, v);
    return v;
  }

  function drawHistory(v, h, now) {
    const results = h ? h.results : [];
    const pad = BARS - results.length;
    v.cells.forEach((cell, i) => {
      const r = results[i - pad];
      cell.className = r ? (inMaintenance(r) ? "maint" : r[1] ? "ok" : "fail") : "";
      cell.title = r ? `${clock(r[0])} · ${r[1] ? "ok" : "failed"}${r[3] ? " · " + r[3] : ""} · ${ms(r[2])}` : "";
    });
    const top = Math.max(0.001, ...results.map((r) => r[2]));
    v.line.setAttribute("points", results.map((r, i) => `${pad + i + 0.5},${(29 - (r[2] / top) * 27).toFixed(2)}`).join(" "));
    v.marks.replaceChildren(...results.flatMap((r, i) => {
      if (r[1] || inMaintenance(r)) return [];
      const m = document.createElementNS(SVG, "rect");
      m.setAttribute("x", pad + i + 0.1); m.setAttribute("y", 27); m.setAttribute("width", 0.8); m.setAttribute("height", 3);
      return [m];
    }));
    v.scale.textContent = "";
    el("span", "", v.scale).textContent = results.length ? ago(now - results[0][0]) : "no results yet";
    el("span", "", v.scale).textContent = results.length ? `latency, max ${ms(top)}` : "";
    v.uptime.replaceChildren();
    for (const [name, label] of [["1h", "1 h"], ["24h", "24 h"], ["7d", "7 d"]]) {
      const cell = el("div", "", v.uptime);
      const [figure, covered] = uptimeOf(h, name);
      el("b", "", cell).textContent = figure;
      if (covered) el("small", "", cell).textContent = covered;
      el("small", "", cell).textContent = label;
    }
  }

  function stateText(v, last, h, now, upWord, downWord) {
    const up = last ? last.success : null;
    v.badge.textContent = up === null ? "pending" : up ? upWord : downWord;
    v.badge.className = "badge " + (up === null ? "" : up ? "up" : "down");
    v.root.classList.toggle("is-down", up === false);
    if (h && h.since !== null && up !== null) {
      v.state.textContent = `${up ? "up" : "down"} since ${when(h.since, now)} (${span(now - h.since)})`;
    } else {
      v.state.textContent = up === null ? "not checked yet" : "";
    }
    v.checked.textContent = last ? `last checked ${clock(last.at)} (${ago(now - last.at)})` : "";
  }

  function readinessText(d, now) {
    const r = d.readiness;
    if (!r) return d.is_primary ? "" : "readiness: not checked yet";
    const failed = Object.entries(r.checks).filter(([, c]) => !c.ready).map(([k, c]) => `${k} (${c.detail})`);
    let text = r.ready ? "ready to take the traffic" : `not ready: ${failed.join("; ")}`;
    const expiry = r.chain_not_after || r.leaf_not_after;
    if (expiry && r.checks.cert && r.checks.cert.ready) {
      text += expiry - now > 60 * 86400 ? ` · certificate valid until ${day(expiry)}`
        : ` · certificate expires in ${span(expiry - now)}`;
    }
    return text;
  }

  function render(doc) {
    const now = doc.now;
    document.getElementById("location").textContent = `@ ${doc.location}`;
    const main = document.getElementById("pools");
    const keep = new Set();
    for (const [name, pool] of Object.entries(doc.pools)) {
      let card = main.querySelector(`article[data-pool="${CSS.escape(name)}"]`);
      if (!card) {
        card = el("article", "card", main);
        card.dataset.pool = name;
      }
      const key = JSON.stringify([name, ""]);
      keep.add(key);
      const pv = view(key, card, true);
      pv.name.textContent = `pool ${name}`;
      const last = pool.last;
      stateText(pv, last, pool.history, now, "AVAILABLE", "UNAVAILABLE");
      pv.detail.textContent = !last ? ""
        : last.success ? `served by ${host(last.served_by)} after ${plural(last.attempts, "attempt")} in ${ms(last.duration)}`
          : `users get an error: ${last.error_type}${last.attempts ? ` after ${plural(last.attempts, "attempt")}` : ""}`;
      drawHistory(pv, pool.history, now);
      for (const [url, d] of Object.entries(pool.domains)) {
        const dkey = JSON.stringify([name, url]);
        keep.add(dkey);
        const dv = view(dkey, card, false);
        d.is_primary = url === pool.primary;
        dv.name.textContent = `${host(url)}${d.is_primary ? " (primary)" : ""}`;
        stateText(dv, d.last, d.history, now, "UP", "DOWN");
        if (d.maintenance) {
          dv.badge.textContent = "MAINTENANCE";
          dv.badge.className = "badge maint";
          dv.root.classList.remove("is-down");
        }
        const mismatch = !!(d.dns && d.dns.mismatch);  // failover_dns_mismatch 1 (checks/dns.py)
        if (mismatch && !dv.dns) dv.dns = el("span", "badge dns", dv.badge.parentNode);
        if (dv.dns) dv.dns.hidden = !mismatch;
        if (mismatch) dv.dns.textContent = "DNS MISMATCH";
        const parts = [];
        if (d.last) parts.push(d.last.success ? `${d.last.status} in ${ms(d.last.duration)}`
          : `${d.last.error_type}${d.last.detail ? ": " + d.last.detail : ""}`);
        if (d.breaker !== "closed") parts.push(`breaker ${d.breaker.replace("_", "-")}`);
        const ready = readinessText(d, now);
        if (ready) parts.push(ready);
        if (mismatch) parts.push(`DNS mismatch: the system resolves ${d.dns.system.join(", ")}, ` +
          `the resolver ${d.dns.resolver.join(", ")} (hijacked at this location?)`);
        dv.detail.textContent = parts.join(" · ");
        dv.detail.classList.toggle("warn", !!(d.readiness && !d.readiness.ready) || mismatch);
        drawHistory(dv, d.history, now);
      }
    }
    for (const [key, v] of views) {
      if (!keep.has(key)) { v.root.remove(); views.delete(key); }
    }
    main.querySelectorAll("article").forEach((card) => { if (!card.querySelector(".check")) card.remove(); });
    maintenanceBanner(doc.maintenance, now);
    document.getElementById("control").textContent = controlText(doc.control, now);
    const s = doc.history;
    document.getElementById("storage").textContent = !s ? ""
      : s.backend === "sqlite" ? `History: ${s.path}, kept ${plural(s.retention_days, "day")}.`
        : `History in memory only${s.error ? ` (${s.error})` : ""}: it starts again when the agent restarts.`;
  }

  function maintenanceBanner(m, now) {
    const banner = document.getElementById("maintenance");
    const what = (w) => `${w.domains.map(host).join(", ")} (pool ${w.pool})`;
    const why = (w) => (w.reason ? `: ${w.reason}` : "");
    const lines = !m ? [] : [
      ...m.active.map((w) => `Maintenance under way on ${what(w)} until ${when(w.end, now)}${why(w)}. ` +
        "Its results do not count as downtime."),
      ...m.upcoming.map((w) => `Planned maintenance on ${what(w)} from ${when(w.start, now)} to ` +
        `${when(w.end, now)}${why(w)}.` + (w.drain ? ` Clients are moved away from ${when(w.start - w.drain, now)}.` : "")),
    ];
    banner.replaceChildren(...lines.map((text) => { const p = el("p"); p.textContent = text; return p; }));
    banner.hidden = !lines.length;
  }

  function controlText(c, now) {
    if (!c) return "No control document: the agent does not publish one, or has not signed the first yet.";
    const version = c.version_time === null || c.version_time === undefined ? `Version ${c.version}`
      : `Version of ${day(c.version_time)} ${iso(c.version_time).slice(11, 23)} UTC (${c.version})`;
    const when = `${version}, signed ${ago(now - c.issued_at)}. `;
    const off = Object.entries(c.disabled).filter(([, urls]) => urls.length);
    const what = off.length ? off.map(([pool, urls]) =>
      `Clients of pool ${pool} skip ${urls.map(host).join(" and ")}.`).join(" ")
      : "Every domain is enabled: clients use their usual order.";
    return when + what + (c.error ? ` The last document could not be written: ${c.error}.` : "");
  }

  async function refresh() {
    const problem = document.getElementById("problem");
    try {
      const response = await fetch("status.json", { cache: "no-store" });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const doc = await response.json();
      render(doc);
      lastGood = Date.now();
      refreshMs = Math.max(250, (doc.refresh || 2) * 1000);
      updates += 1;
      document.body.dataset.updates = String(updates);
      document.getElementById("updated").textContent = `Updated ${clock(doc.now)}, every ${refreshMs / 1000} s`;
      problem.hidden = true;
    } catch (err) {
      problem.hidden = false;
      problem.textContent = `Cannot reach the agent (${err.message}).` +
        (lastGood ? ` Showing what it said ${ago((Date.now() - lastGood) / 1000)}.` : "");
    } finally {
      setTimeout(refresh, refreshMs);
    }
  }

  refresh();
})();
