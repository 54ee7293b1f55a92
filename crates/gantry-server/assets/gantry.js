// Gantry's web UI: small enhancements of pages that work without them. Copy buttons, live
// workflow events and statuses and live logs (Server-Sent Events), regions that refresh
// themselves, and delete buttons that wait for the typed name.
'use strict';
(function () {
  const $ = (sel, root) => (root || document).querySelector(sel);
  const $$ = (sel, root) => Array.from((root || document).querySelectorAll(sel));

  // Tells screen-reader users what happened without moving their focus.
  function announce(text) {
    const el = $('#announce');
    if (!el) return;
    el.textContent = '';
    setTimeout(() => { el.textContent = text; }, 50);
  }

  function setStatusClass(el, status) {
    if (!el) return;
    Array.from(el.classList).filter((c) => c.startsWith('s-')).forEach((c) => el.classList.remove(c));
    el.classList.add('s-' + status);
  }

  function setStatus(el, status) {
    if (!el) return;
    setStatusClass(el, status);
    el.textContent = status;
  }

  function initCopy(root) {
    $$('button.copy[data-copy]', root).forEach((b) => {
      b.hidden = false;
      b.addEventListener('click', async () => {
        const text = b.dataset.copy;
        let ok = false;
        try {
          await navigator.clipboard.writeText(text);
          ok = true;
        } catch (_) {
          // Without the clipboard API (plain http on another host): the old way.
          const ta = document.createElement('textarea');
          ta.value = text;
          ta.setAttribute('readonly', '');
          ta.className = 'visually-hidden';
          document.body.appendChild(ta);
          ta.select();
          try { ok = document.execCommand('copy'); } catch (_) { ok = false; }
          ta.remove();
          b.focus();
        }
        const label = b.firstChild;
        const was = label.textContent;
        label.textContent = ok ? 'Copied' : 'Copy failed';
        announce(ok ? 'Copied' : 'It could not be copied');
        setTimeout(() => { label.textContent = was; }, 2000);
      });
    });
  }

  function initTypedConfirm() {
    $$('form[data-typed-confirm]').forEach((f) => {
      const want = f.dataset.typedConfirm;
      const input = $('input[name="confirm"]', f);
      const button = $('button[type="submit"]', f);
      const sync = () => { button.disabled = input.value.trim() !== want; };
      input.addEventListener('input', sync);
      sync();
    });
  }

  // A region with data-poll="N" is fetched again every N seconds and replaced when it
  // changed, unless the user is working in it (typing in a field, a disclosure open). Focus
  // on a link or button inside stays on the same one after the replacement.
  const FOCUSABLE = 'a[href], button, input, select, textarea, summary, [tabindex]';
  function initPoll() {
    $$('[data-poll]').forEach((region) => {
      let last = region.innerHTML;
      const every = Math.max(2, Number(region.dataset.poll) || 5) * 1000;
      const tick = async () => {
        const active = document.activeElement;
        const inside = region.contains(active);
        if (document.hidden || $('details[open]', region)) return;
        if (inside && active.matches('input, select, textarea')) return;
        try {
          const r = await fetch(location.href, { credentials: 'same-origin' });
          if (!r.ok || r.redirected) return;
          const doc = new DOMParser().parseFromString(await r.text(), 'text/html');
          const fresh = doc.getElementById(region.id);
          if (!fresh || fresh.innerHTML === last) return;
          const at = inside ? $$(FOCUSABLE, region).indexOf(document.activeElement) : -1;
          last = fresh.innerHTML;
          region.innerHTML = fresh.innerHTML;
          initCopy(region);
          const again = at >= 0 ? $$(FOCUSABLE, region)[at] : null;
          if (again) again.focus();
        } catch (_) { /* the next tick tries again */ }
      };
      setInterval(tick, every);
    });
  }

  function eventItem(e) {
    const li = document.createElement('li');
    li.className = 'new';
    const t = document.createElement('time');
    t.dateTime = e.time;
    t.title = e.time;
    t.textContent = e.clock;
    const kind = document.createElement('span');
    kind.className = 'kind';
    kind.textContent = e.kind;
    li.append(t, ' ', kind);
    if (e.task) {
      const task = document.createElement('span');
      task.className = 'task';
      task.textContent = e.task;
      li.append(' ', task);
    }
    const msg = document.createElement('span');
    msg.className = 'msg';
    msg.textContent = e.message;
    li.append(' ', msg);
    return li;
  }

  function atBottom(el) {
    return el.scrollTop + el.clientHeight >= el.scrollHeight - 8;
  }

  function initWorkflow() {
    const box = $('[data-live-workflow]');
    if (!box || !window.EventSource) return;
    const list = $('#events');
    const es = new EventSource(box.dataset.liveWorkflow);
    es.addEventListener('event', (m) => {
      const follow = atBottom(list);
      list.append(eventItem(JSON.parse(m.data)));
      if (follow) list.scrollTop = list.scrollHeight;
    });
    es.addEventListener('status', (m) => {
      const s = JSON.parse(m.data);
      setStatus($('[data-wf-status]'), s.status);
      const reason = $('[data-wf-reason]');
      if (reason) reason.textContent = s.reason;
      const reasonRow = $('[data-wf-reason-row]');
      if (reasonRow) reasonRow.hidden = !s.reason;
      s.jobs.forEach((j) => {
        const g = $('[data-job="' + CSS.escape(j.name) + '"]');
        if (!g) return;
        setStatusClass(g, j.status);
        $('[data-field="status"]', g).textContent = j.status;
        $('[data-field="progress"]', g).textContent = j.progress;
      });
      s.tasks.forEach((t) => {
        const row = $('[data-task="' + CSS.escape(t.id) + '"]');
        if (!row) return;
        setStatus($('[data-field="status"]', row), t.status);
        ['node', 'attempts', 'exit_code', 'reason'].forEach((f) => {
          const cell = $('[data-field="' + f + '"]', row);
          if (cell) cell.textContent = t[f];
        });
      });
      if (s.terminal) {
        $$('[data-hide-when-ended]').forEach((el) => el.remove());
        const state = $('[data-live-state]');
        if (state) state.textContent = 'The workflow has ended ' + s.status + '.';
        announce('The workflow has ended ' + s.status);
      }
    });
    es.addEventListener('end', () => es.close());
  }

  // Every stream on a log page follows live; the page says the end once all have ended.
  function initLog() {
    const pres = $$('[data-live-log]');
    if (!pres.length || !window.EventSource) return;
    const state = $('[data-log-state]');
    let open = pres.length;
    pres.forEach((pre) => {
      const es = new EventSource(pre.dataset.liveLog);
      es.addEventListener('log', (m) => {
        const follow = atBottom(pre);
        pre.append(JSON.parse(m.data));
        pre.dispatchEvent(new Event('log-grew'));
        if (follow) pre.scrollTop = pre.scrollHeight;
      });
      es.addEventListener('end', () => {
        es.close();
        open -= 1;
        if (open === 0 && state) state.textContent = 'End of output: the attempt has ended.';
      });
    });
  }

  // The search box filters each stream to its lines that hold the words (case-insensitive),
  // marking them; the full text stays in the page, and comes back when the box is empty.
  function initLogSearch() {
    const box = $('[data-log-search]');
    const input = $('#log-q');
    if (!box || !input) return;
    box.hidden = false;
    const count = $('[data-log-count]');
    const pres = $$('pre.log');
    const views = new Map();
    pres.forEach((pre) => {
      const v = document.createElement('pre');
      v.className = 'log log-matches';
      v.tabIndex = 0;
      v.hidden = true;
      v.setAttribute('aria-label', 'lines of ' + pre.dataset.stream + ' that match');
      v.dataset.matchesOf = pre.dataset.stream;
      pre.after(v);
      views.set(pre, v);
    });
    const run = () => {
      const q = input.value.trim().toLowerCase();
      let total = 0;
      pres.forEach((pre) => {
        const v = views.get(pre);
        if (!q) { v.hidden = true; pre.hidden = false; return; }
        v.textContent = '';
        pre.textContent.split('\n').forEach((line) => {
          const low = line.toLowerCase();
          if (!low.includes(q)) return;
          total += 1;
          const row = document.createElement('span');
          row.className = 'match-line';
          let at = 0;
          for (let i = low.indexOf(q); i >= 0; i = low.indexOf(q, at)) {
            row.append(line.slice(at, i));
            const mk = document.createElement('mark');
            mk.textContent = line.slice(i, i + q.length);
            row.append(mk);
            at = i + q.length;
          }
          row.append(line.slice(at), '\n');
          v.append(row);
        });
        pre.hidden = true;
        v.hidden = false;
      });
      count.textContent = q ? (total === 1 ? '1 matching line' : total + ' matching lines') : '';
    };
    input.addEventListener('input', run);
    pres.forEach((pre) => pre.addEventListener('log-grew', () => { if (input.value.trim()) run(); }));
  }

  // "New workflow": an uploaded file fills the text box (and the name, when empty); a
  // problem's position selects its line in the text box.
  function initNewWorkflow() {
    const form = $('[data-new-workflow]');
    if (!form) return;
    const ta = $('#spec', form);
    const upload = $('[data-upload]', form);
    const file = $('#spec-file', form);
    const name = $('#wf-name', form);
    upload.hidden = false;
    file.addEventListener('change', async () => {
      const f = file.files[0];
      if (!f) return;
      ta.value = await f.text();
      if (!name.value) name.value = f.name.replace(/\.(ya?ml|json)$/i, '');
      announce('The file ' + f.name + ' is in the text box');
    });
    $$('[data-goto-line]').forEach((a) => {
      a.addEventListener('click', (ev) => {
        ev.preventDefault();
        const line = Number(a.dataset.gotoLine);
        const lines = ta.value.split('\n');
        let start = 0;
        for (let i = 0; i < line - 1 && i < lines.length; i += 1) start += lines[i].length + 1;
        const end = start + (lines[line - 1] || '').length;
        ta.focus();
        ta.setSelectionRange(start, end);
        // Scroll the selected line into view: about one line's height per line.
        const lh = parseFloat(getComputedStyle(ta).lineHeight) || 20;
        ta.scrollTop = Math.max(0, (line - 3) * lh);
      });
    });
  }

  initPoll();
  initCopy(document);
  initNewWorkflow();
  initTypedConfirm();
  initWorkflow();
  initLog();
  initLogSearch();
}());
