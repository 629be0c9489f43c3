// sluice dashboard: polls the live picture and runs the playground.
// Everything the server sends is inserted as text or as parsed SVG nodes,
// never as HTML, and no handler is inline: the page works under a strict
// Content-Security-Policy.
'use strict';

(function () {
  const $ = (id) => document.getElementById(id);
  const LIVE_EVERY_MS = 2000;

  // svgFrom parses an SVG document and returns its root, ready to insert.
  function svgFrom(text) {
    const doc = new DOMParser().parseFromString(text, 'image/svg+xml');
    const root = doc.documentElement;
    if (root.localName !== 'svg' || doc.getElementsByTagName('parsererror').length > 0) {
      throw new Error('the server sent a picture that is not SVG');
    }
    return document.importNode(root, true);
  }

  // problemText reads an error response: its problem's detail if it has one.
  async function problemText(resp) {
    const text = await resp.text();
    try {
      const p = JSON.parse(text);
      if (p && typeof p.detail === 'string') return p.detail;
    } catch (e) { /* not JSON: the text itself */ }
    return text.trim() || resp.status + ' ' + resp.statusText;
  }

  function el(tag, className, text) {
    const e = document.createElement(tag);
    if (className) e.className = className;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // ---- Live ----

  const livePicture = $('live-picture');
  const liveSpan = $('live-span');
  const liveStatus = $('live-status');
  let liveSeq = 0;
  let liveTimer = 0;

  async function pollLive() {
    clearTimeout(liveTimer);
    const seq = ++liveSeq;
    if (document.hidden) {
      liveTimer = setTimeout(pollLive, LIVE_EVERY_MS);
      return;
    }
    try {
      const resp = await fetch('api/live.svg?seconds=' + encodeURIComponent(liveSpan.value), { cache: 'no-store' });
      if (!resp.ok) throw new Error(await problemText(resp));
      const svg = svgFrom(await resp.text());
      if (seq !== liveSeq) return; // a newer poll has started
      livePicture.replaceChildren(svg);
      liveStatus.textContent = 'updated ' + new Date().toLocaleTimeString();
      liveStatus.classList.remove('bad');
    } catch (e) {
      if (seq !== liveSeq) return;
      liveStatus.textContent = 'live data unavailable: ' + e.message;
      liveStatus.classList.add('bad');
    }
    if (seq === liveSeq) liveTimer = setTimeout(pollLive, LIVE_EVERY_MS);
  }

  liveSpan.addEventListener('change', pollLive);
  document.addEventListener('visibilitychange', () => { if (!document.hidden) pollLive(); });

  // ---- Playground ----

  pollLive();
  const form = $('sim-form');
  if (!form) return; // the playground is off on this server
  const scenario = $('scenario');
  const runButton = $('run');
  const simStatus = $('sim-status');
  const simError = $('sim-error');
  const csv = $('csv');

  function source() {
    return form.elements.source.value === 'csv' ? 'csv' : 'builtin';
  }

  // applyScenario fills the fields with the chosen scenario's own values.
  function applyScenario() {
    const opt = scenario.selectedOptions[0];
    if (!opt) return;
    $('limit').value = opt.dataset.limit;
    $('seconds').value = opt.dataset.seconds;
    const setups = opt.dataset.setups.split(',');
    for (const box of form.querySelectorAll('input[name=setups]')) {
      box.checked = setups.includes(box.value);
    }
    $('scenario-summary').textContent = opt.dataset.summary;
  }

  function applySource() {
    const own = source() === 'csv';
    $('builtin-fields').hidden = own;
    $('csv-fields').hidden = !own;
    if (own) {
      $('seconds').value = '';
      for (const box of form.querySelectorAll('input[name=setups]')) {
        box.checked = box.value === 'single';
      }
      csv.focus();
    } else {
      applyScenario();
    }
  }

  function showError(text, line) {
    simError.textContent = text;
    simError.hidden = false;
    $('sim-result').hidden = true; // it answered another request
    if (line && source() === 'csv') {
      // Select the line at fault.
      const lines = csv.value.split('\n');
      let start = 0;
      for (let i = 0; i < line - 1 && i < lines.length; i++) start += lines[i].length + 1;
      const end = start + (lines[line - 1] || '').length;
      csv.focus();
      csv.setSelectionRange(start, end);
    }
  }

  async function run() {
    simError.hidden = true;
    const own = source() === 'csv';
    // A multipart form with the traffic as a file: its bytes go as they
    // are, where a URL-encoded form would take up to three bytes for
    // each comma and line break, and hit the server's size limit long
    // before the page's hint says.
    const body = new FormData();
    for (const [k, v] of new FormData(form)) {
      if (k === 'source' || k === 'csv' || v === '') continue;
      if (own && k === 'scenario') continue;
      body.append(k, v);
    }
    if (own && csv.value !== '') {
      body.append('csv', new Blob([csv.value], { type: 'text/csv' }), 'traffic.csv');
    }
    if (!body.has('algorithms')) {
      showError('Choose at least one algorithm.');
      return;
    }
    if (!body.has('setups')) {
      showError('Choose at least one setup.');
      return;
    }
    body.append('svg', '1');
    runButton.disabled = true;
    simStatus.textContent = 'running…';
    try {
      const resp = await fetch('api/sim', { method: 'POST', body: body });
      if (!resp.ok) {
        const text = await resp.text();
        let p = null;
        try { p = JSON.parse(text); } catch (e) { /* not a problem */ }
        if (p && typeof p.detail === 'string') {
          showError(p.detail, p.line);
        } else {
          showError(text.trim() || resp.status + ' ' + resp.statusText);
        }
        simStatus.textContent = '';
        return;
      }
      const res = await resp.json();
      showResult(res);
      simStatus.textContent = res.requests + ' requests replayed';
      if (!own) {
        const url = new URL(window.location.href);
        url.searchParams.set('scenario', res.scenario);
        url.searchParams.delete('run');
        window.history.replaceState(null, '', url);
      }
    } catch (e) {
      showError('The simulation failed: ' + e.message);
      simStatus.textContent = '';
    } finally {
      runButton.disabled = false;
    }
  }

  // showResult draws a SimResponse: the totals table, the picture and the
  // scenario's description.
  function showResult(res) {
    $('sim-title').textContent = res.scenario + ' — limit ' + res.limit;

    const algorithms = [];
    const setups = [];
    for (const row of res.results) {
      if (!algorithms.includes(row.algorithm)) algorithms.push(row.algorithm);
      if (!setups.includes(row.setup)) setups.push(row.setup);
    }
    const table = $('totals');
    const head = el('tr');
    head.append(el('th', '', 'algorithm'));
    for (const s of setups) {
      const th = el('th', '', s);
      th.scope = 'col';
      head.append(th);
    }
    table.tHead.replaceChildren(head);
    const body = table.tBodies[0];
    body.replaceChildren();
    for (const a of algorithms) {
      const tr = el('tr');
      const th = el('th', '', a);
      th.scope = 'row';
      tr.append(th);
      for (const s of setups) {
        const row = res.results.find((r) => r.algorithm === a && r.setup === s);
        const td = el('td');
        if (row) {
          td.dataset.algorithm = a;
          td.dataset.setup = s;
          td.dataset.passed = row.passed;
          td.dataset.refused = row.refused;
          td.append(el('span', 'passed', row.passed + ' passed'));
          td.append(el('span', 'refused', '✕ ' + row.refused));
          // Of those passed, the ones held back first (a leaky_bucket's
          // turn, a unit within max delay); of those refused, the ones
          // no wait lets through, which a store answers with an error.
          if (row.held) {
            td.dataset.held = row.held;
            td.append(el('span', 'held', row.held + ' held'));
          }
          if (row.over_capacity) {
            td.dataset.overCapacity = row.over_capacity;
            td.append(el('span', 'refused', row.over_capacity + ' over capacity'));
          }
        }
        tr.append(td);
      }
      body.append(tr);
    }

    const picture = $('sim-picture');
    picture.replaceChildren();
    if (res.svg) picture.append(svgFrom(res.svg));

    const desc = $('sim-description');
    desc.replaceChildren();
    for (const para of (res.description || '').split(/\n\s*\n|\n/)) {
      if (para.trim()) desc.append(el('p', '', para));
    }
    $('sim-result').hidden = false;
  }

  form.addEventListener('submit', (e) => {
    e.preventDefault();
    run();
  });
  scenario.addEventListener('change', applyScenario);
  for (const radio of form.querySelectorAll('input[name=source]')) {
    radio.addEventListener('change', applySource);
  }

  // ?scenario=NAME picks a scenario; &run=1 runs it at once.
  const params = new URLSearchParams(window.location.search);
  const wanted = params.get('scenario');
  if (wanted && Array.from(scenario.options).some((o) => o.value === wanted)) {
    scenario.value = wanted;
  }
  applySource();
  if (params.get('run') === '1') run();
})();
