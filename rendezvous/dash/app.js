/* muster dashboard (docs/DASHBOARD.md): polls /status about once a second and redraws the jobs.
 * Every string from /status came from a peer (host names, checkpoint names, failure texts), so
 * the page builds its DOM with createElement and text nodes only: nothing here assigns HTML
 * (no innerHTML, outerHTML, insertAdjacentHTML or document.write). The observer credential is
 * kept in this tab's sessionStorage and sent as "Authorization: Bearer"; it is never shown. */
'use strict';

(function () {
  var POLL_MS = 1000;
  var SPARK_POINTS = 60;
  var KEY = 'muster.observer';
  var sparks = {}; /* "job\u0000host\u0000gpu" -> {t, util: [], mem: []} */
  var lastOk = 0;
  var timer = null;
  var LOG_LINES = 50;
  var logs = {}; /* job id -> {open, rank ('' = every rank), doc (the last /logs answer), error} */

  /* --- DOM helpers: text only ----------------------------------------------------------- */
  function el(tag, cls) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    for (var i = 2; i < arguments.length; i++) add(e, arguments[i]);
    return e;
  }
  function add(parent, child) {
    if (child === null || child === undefined) return;
    if (Array.isArray(child)) {
      child.forEach(function (c) { add(parent, c); });
      return;
    }
    if (typeof child === 'object' && child.nodeType) parent.appendChild(child);
    else parent.appendChild(document.createTextNode(String(child)));
  }
  function clear(e) {
    while (e.firstChild) e.removeChild(e.firstChild);
  }
  /* a state word as a pill; the class comes from a fixed list, never from the peer's text */
  var STATES = ['running', 'recovering', 'gathering', 'done', 'failed', 'joined', 'waiting',
    'spare', 'ok', 'warning', 'failure', 'recorded', 'bad', 'live', 'stale', 'down', 'lost'];
  function pill(word) {
    var w = String(word);
    return el('span', 'pill' + (STATES.indexOf(w) >= 0 ? ' s-' + w : ''), w);
  }
  function td(text, cls) { return el('td', cls || null, text); }
  function table(headers, rows) {
    var head = el('tr', null, headers.map(function (h) {
      var th = el('th', null, h[0]);
      if (h[1]) th.className = h[1];
      return th;
    }));
    return el('div', 'tablewrap', el('table', null, el('thead', null, head),
      el('tbody', null, rows)));
  }
  function facts(list) {
    return el('dl', 'facts', list.filter(function (f) { return f !== null; }).map(function (f) {
      return el('div', null, el('dt', null, f[0]), el('dd', null, f[1]));
    }));
  }
  function section(title, body) { return [el('h3', null, title), body]; }
  function has(o, k) { return o !== null && typeof o === 'object' && o[k] !== undefined && o[k] !== null; }

  /* --- formatting ------------------------------------------------------------------------ */
  function num(v, digits) {
    if (typeof v !== 'number' || !isFinite(v)) return '–';
    return digits === undefined ? String(v) : v.toFixed(digits);
  }
  function bytes(n) {
    if (typeof n !== 'number' || n < 0) return '–';
    var u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'], i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i === 0 ? String(n) : n.toFixed(n < 10 ? 1 : 0)) + ' ' + u[i];
  }
  function dur(s) {
    if (typeof s !== 'number' || !isFinite(s)) return '–';
    if (s < 1) return Math.round(s * 1000) + ' ms';
    if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + ' s';
    if (s < 3600) return Math.floor(s / 60) + ' min ' + Math.round(s % 60) + ' s';
    if (s < 86400) return Math.floor(s / 3600) + ' h ' + Math.round((s % 3600) / 60) + ' min';
    return Math.floor(s / 86400) + ' d ' + Math.round((s % 86400) / 3600) + ' h';
  }
  function plural(n, word) { return num(n) + ' ' + word + (n === 1 ? '' : 's'); }
  function ago(s) { return typeof s === 'number' ? dur(s) + ' ago' : '–'; }
  function ranks(n) {
    if (typeof n.rank_offset !== 'number' || typeof n.nproc !== 'number') return '–';
    if (n.nproc <= 1) return String(n.rank_offset);
    return n.rank_offset + '–' + (n.rank_offset + n.nproc - 1);
  }
  /* what happened, where the failure's own text is empty (a worker killed by a signal) */
  function causeText(r) {
    if (r.text) return r.text;
    var who = r.rank >= 0 ? 'rank ' + r.rank : 'a worker';
    if (r.signal > 0) return who + ' was killed by signal ' + r.signal;
    if (r.exit_code >= 0) return who + ' exited with code ' + r.exit_code;
    return 'no cause given';
  }
  function exitText(r) {
    if (r.signal > 0) return 'signal ' + r.signal;
    if (r.exit_code >= 0) return 'exit ' + r.exit_code;
    return '–';
  }

  /* --- sparklines (SVG built node by node) ------------------------------------------------ */
  var SVGNS = 'http://www.w3.org/2000/svg';
  function spark(values, max) {
    var svg = document.createElementNS(SVGNS, 'svg');
    svg.setAttribute('class', 'spark');
    svg.setAttribute('viewBox', '0 0 ' + (SPARK_POINTS - 1) + ' 20');
    svg.setAttribute('preserveAspectRatio', 'none');
    svg.setAttribute('aria-hidden', 'true');
    var pts = [], off = SPARK_POINTS - values.length;
    values.forEach(function (v, i) {
      var y = 19 - Math.max(0, Math.min(1, (v || 0) / (max || 1))) * 18;
      pts.push((off + i) + ',' + y.toFixed(1));
    });
    var line = document.createElementNS(SVGNS, 'polyline');
    line.setAttribute('points', pts.join(' '));
    svg.appendChild(line);
    return svg;
  }
  function remember(key, t, util, mem) {
    var h = sparks[key] || (sparks[key] = {t: null, util: [], mem: [], seen: 0});
    h.seen = Date.now();
    if (t !== null && t === h.t) return h;
    h.t = t;
    h.util.push(util);
    h.mem.push(mem);
    if (h.util.length > SPARK_POINTS) { h.util.shift(); h.mem.shift(); }
    return h;
  }

  /* --- the parts of a job ----------------------------------------------------------------- */
  function nodesPart(job) {
    var nodes = job.nodes || [];
    if (nodes.length === 0) return section('Nodes', el('p', 'empty', 'no node has joined'));
    var rows = nodes.map(function (n) {
      var age = typeof n.last_seen_ms_ago === 'number' ? n.last_seen_ms_ago / 1000 : null;
      var tr = el('tr', 'node', td(n.host, 'host'), td(n.addr, 'hide-narrow'),
        el('td', null, pill(n.state)), td(n.group_rank === null ? '–' : n.group_rank, 'num'),
        td(ranks(n), 'num ranks'), td(n.nproc, 'num'),
        td(age === null ? '–' : dur(age), 'num hb'),
        td(typeof n.heartbeat_gap_max_ms === 'number' ? dur(n.heartbeat_gap_max_ms / 1000) : '–',
          'num hide-narrow'));
      return tr;
    });
    return section('Nodes (' + nodes.length + ')', table([['host'], ['address', 'hide-narrow'],
      ['state'], ['group rank', 'num'], ['ranks', 'num'], ['procs', 'num'],
      ['heartbeat age', 'num'], ['max gap', 'num hide-narrow']], rows));
  }

  function gpusPart(job) {
    var rows = [];
    (job.nodes || []).forEach(function (n) {
      var tel = n.telemetry;
      if (!tel || !Array.isArray(tel.gpus)) return;
      tel.gpus.forEach(function (g) {
        var memPct = g.mem_total > 0 ? 100 * g.mem_used / g.mem_total : null;
        var h = remember(job.id + '\u0000' + n.host + '\u0000' + g.gpu,
          has(tel, 't_ms') ? tel.t_ms : null, g.util, memPct);
        var procs = Array.isArray(g.procs) ? g.procs.map(function (p) {
          return (p.rank === null || p.rank === undefined ? 'pid ' + p.pid : 'rank ' + p.rank) +
            (typeof p.mem === 'number' ? ' ' + bytes(p.mem) : '');
        }).join(', ') : '';
        var events = [];
        if (g.throttle) events.push('throttle ' + g.throttle);
        if (g.xid) events.push('Xid ' + g.xid);
        if (g.ecc) events.push('ECC ' + g.ecc);
        rows.push(el('tr', 'gpu', td(n.host), td(g.gpu, 'num'),
          el('td', 'num', num(g.util) + ' %', spark(h.util, 100)),
          el('td', 'num', bytes(g.mem_used) + ' / ' + bytes(g.mem_total), spark(h.mem, 100)),
          td(num(g.sm_clock) + ' / ' + num(g.mem_clock) + ' MHz', 'num hide-narrow'),
          td(num(g.temp) + ' °C', 'num'), td(num(g.power_w, 0) + ' W', 'num hide-narrow'),
          td(events.join(', ') || '–'), td(procs || '–')));
      });
    });
    if (rows.length === 0) return null;
    return section('GPUs', table([['host'], ['GPU', 'num'], ['utilisation', 'num'],
      ['memory', 'num'], ['SM / mem clock', 'num hide-narrow'], ['temp', 'num'],
      ['power', 'num hide-narrow'], ['events'], ['processes']], rows));
  }

  function restartsPart(job) {
    var list = job.restarts || [];
    var title = 'Restarts (' + num(job.restart_count) + ' of ' + num(job.max_restarts) + ')';
    if (list.length === 0) return section(title, el('p', 'empty', 'none'));
    var rows = list.map(function (r) {
      var cause = el('td', 'cause', causeText(r));
      if (r.signature && r.signature !== r.text) add(cause, [el('br'), el('span', 'muted', r.signature)]);
      if (r.root_cause) add(cause, [el('br'), el('span', 'verdict', 'root cause: ' + r.root_cause)]);
      return el('tr', 'restart', td(r.round, 'num'),
        td(r.final ? 'job ended' : r.counted ? 'restart ' + r.restart_count : 'not counted'),
        td(ago(r.age_s), 'num'), td(r.host, 'host'), td(r.rank >= 0 ? r.rank : '–', 'num'),
        td(exitText(r), 'num hide-narrow'), cause);
    });
    var more = job.restarts_seen > list.length ?
      el('p', 'muted', (job.restarts_seen - list.length) + ' older not shown') : null;
    return section(title, [table([['round', 'num'], ['counted'], ['when', 'num'], ['host'],
      ['rank', 'num'], ['exit', 'num hide-narrow'], ['cause']], rows), more]);
  }

  function ckptsPart(job) {
    var list = job.checkpoints || [];
    if (list.length === 0) return section('Checkpoints', el('p', 'empty', 'none reported'));
    var rows = list.map(function (c) {
      var reps = Array.isArray(c.replicas) ? c.replicas : [];
      return el('tr', 'ckpt', td(c.name, 'name'), td(c.step, 'num step'), td(bytes(c.size), 'num'),
        td(ago(c.age_s), 'num'), el('td', null, pill(c.state), c.reason ? ' ' + c.reason : ''),
        td(c.host || '–', 'hide-narrow'),
        td(reps.length ? reps.length + ': ' + reps.join(', ') : '0'));
    });
    return section('Checkpoints (' + list.length + ')', table([['name'], ['step', 'num'],
      ['size', 'num'], ['age', 'num'], ['state'], ['recorded by', 'hide-narrow'],
      ['replicas']], rows));
  }

  function failuresPart(job) {
    var list = job.node_failures || [];
    if (list.length === 0) return null;
    var rows = list.map(function (f) {
      return el('tr', 'failure', td(f.host, 'host'), td(f.seen || f.addr, 'hide-narrow'),
        td(f.failures, 'num'), el('td', null, f.excluded ? pill('down') : '–'),
        td(f.reason || ''));
    });
    return section('Failures per node and exclusions', table([['host'],
      ['seen as', 'hide-narrow'], ['failures', 'num'], ['excluded'], ['reason']], rows));
  }

  function preflightPart(job) {
    var list = job.preflight || [];
    if (list.length === 0) return null;
    var rows = [];
    list.forEach(function (n) {
      (n.gpus || []).forEach(function (g) {
        rows.push(el('tr', 'pf', td(n.host), td(g.index, 'num'), td(g.model, 'hide-narrow'),
          td(num(g.gemm_tflops, 1), 'num'), td(num(g.hbm_gbps, 0), 'num'),
          el('td', null, pill(g.level), g.note ? ' ' + g.note : '')));
      });
      if (n.p2p && n.p2p.pairs > 0)
        rows.push(el('tr', 'pf', td(n.host), td('p2p', 'num'), td(n.p2p.pairs + ' pairs', 'hide-narrow'),
          td('–', 'num'), td(num(n.p2p.min_gbps, 0) + ' min / ' + num(n.p2p.median_gbps, 0) +
            ' median', 'num'), el('td', null, pill(n.p2p.level), n.p2p.note ? ' ' + n.p2p.note : '')));
      if (!n.gpus || n.gpus.length === 0)
        rows.push(el('tr', 'pf', td(n.host), td('–', 'num'), td('', 'hide-narrow'), td('–', 'num'),
          td('–', 'num'), el('td', null, pill(n.ok ? 'ok' : 'failure'))));
    });
    return section('Pre-flight', table([['host'], ['GPU', 'num'], ['model', 'hide-narrow'],
      ['GEMM TFLOP/s', 'num'], ['HBM GB/s', 'num'], ['verdict']], rows));
  }

  function warningsPart(job) {
    var list = job.warnings;
    if (!Array.isArray(list) || list.length === 0) return null;
    return section('Warnings (' + list.length + ')', el('ul', 'warnings', list.map(function (w) {
      if (w !== null && typeof w === 'object')
        w = w.text || w.message || w.line || JSON.stringify(w);
      return el('li', null, w);
    })));
  }

  function goodputFacts(job) {
    var g = job.goodput;
    if (!g) return [];
    var out = [['goodput', num(100 * g.ratio, 1) + ' %'], ['wall', dur(g.wall_s)]];
    if (g.seconds && typeof g.seconds.training === 'number')
      out.push(['training', dur(g.seconds.training)]);
    if (typeof g.lost_s === 'number') out.push(['lost to restarts', dur(g.lost_s)]);
    return out;
  }

  /* The tail of the job's log, per rank (GET /logs): asked only while the panel is open. The
   * panel is rebuilt with the page each second; its state lives in logs[job]. */
  function logsPart(job) {
    var st = logs[job.id] || (logs[job.id] = {open: false, rank: '', doc: null, error: null});
    var det = el('details', 'logs');
    det.open = st.open;
    det.addEventListener('toggle', function () {
      /* a panel built open fires toggle too: only a change of the user's counts */
      if (det.open === st.open) return;
      st.open = det.open;
      if (det.open) fetchLogs(job.id);
    });
    var sel = el('select', 'logrank');
    sel.setAttribute('aria-label', 'rank');
    add(sel, el('option', null, 'every rank'));
    sel.options[0].value = '';
    for (var r = 0; r < (job.world_size || 0) && r < 4096; r++) {
      var o = el('option', null, 'rank ' + r);
      o.value = String(r);
      add(sel, o);
    }
    sel.value = st.rank;
    sel.addEventListener('change', function () {
      st.rank = sel.value;
      st.doc = null;
      fetchLogs(job.id);
    });
    var body;
    if (st.error) body = el('p', 'muted', st.error);
    else if (!st.doc) body = el('p', 'muted', st.open ? 'loading' : '');
    else if (st.doc.lines.length === 0) body = el('p', 'empty', 'no lines yet');
    else {
      body = el('pre', 'loglines', st.doc.lines.map(function (l) {
        return el('span', 'logline' + (l.stream === 'stderr' ? ' stderr' : ''),
          '[rank' + l.rank + ']: ' + l.text + '\n');
      }));
    }
    var dropped = st.doc && st.doc.dropped ? el('p', 'muted', st.doc.dropped + ' lines dropped by ' +
      'the caps (muster logs says which)') : null;
    add(det, [el('summary', null, 'Log (newest ' + LOG_LINES + ' lines)'), el('div', 'logbar', sel),
      body, dropped]);
    return det;
  }

  function fetchLogs(id) {
    var st = logs[id];
    if (!st || !st.open) return;
    var headers = {};
    var cred = sessionStorage.getItem(KEY);
    if (cred) headers.Authorization = 'Bearer ' + cred;
    var q = '/logs?job=' + encodeURIComponent(id) + '&n=' + LOG_LINES +
      (st.rank !== '' ? '&rank=' + encodeURIComponent(st.rank) : '');
    var asked = st.rank;
    fetch(q, {headers: headers, cache: 'no-store', credentials: 'omit'})
      .then(function (r) {
        if (r.status === 429) return null; /* the server's cap: the next poll asks again */
        if (!r.ok) throw new Error('HTTP ' + r.status);
        return r.json();
      })
      .then(function (doc) {
        if (doc === null || st.rank !== asked) return;
        if (!doc || !Array.isArray(doc.lines)) throw new Error('not a log');
        st.doc = doc;
        st.error = null;
        redrawLogs(id);
      })
      .catch(function (e) {
        st.error = 'the log could not be read (' + e.message + ')';
        redrawLogs(id);
      });
  }

  /* only the job's log panel: the rest of the page waits for the next /status */
  function redrawLogs(id) {
    var secs = document.querySelectorAll('section.job');
    for (var i = 0; i < secs.length; i++) {
      if (secs[i].getAttribute('data-job') !== id || !lastJobs[id]) continue;
      var old = secs[i].querySelector('details.logs');
      if (old) secs[i].replaceChild(logsPart(lastJobs[id]), old);
    }
  }
  var lastJobs = {};

  function jobPart(job) {
    var sec = el('section', 'job');
    sec.setAttribute('data-job', job.id);
    add(sec, el('h2', null, el('span', 'jobid', job.id), pill(job.state)));
    var f = [['round', num(job.round)],
      ['restarts', num(job.restart_count) + ' / ' + num(job.max_restarts)],
      ['nodes', num((job.nodes || []).filter(function (n) {
        return n.state !== 'spare' && n.state !== 'waiting';
      }).length) + ' (' + num(job.min_nodes) + '–' + num(job.max_nodes) + ')'],
      ['world size', num(job.world_size)],
      ['spares', num(job.spares)], ['waiting', num(job.waiting)],
      ['excluded', num(job.excluded) + (job.exclude_after ? ' (after ' + job.exclude_after +
        ' failures)' : '')]];
    if (job.resume !== undefined)
      f.push(['resumed from', job.resume === null ? 'start' : job.resume +
        (typeof job.resume_step === 'number' && job.resume_step >= 0 ? ' (step ' + job.resume_step + ')' : '')]);
    f = f.concat(goodputFacts(job));
    add(sec, facts(f));
    if (job.evidence && job.evidence.root_cause)
      add(sec, el('p', 'verdict', 'Last verdict (round ' + job.evidence.round + '): ' +
        job.evidence.root_cause));
    add(sec, warningsPart(job));
    if (job.truncated || !job.nodes) {
      add(sec, el('p', 'muted', 'no details: the status document left them out (too large)'));
      return sec;
    }
    add(sec, nodesPart(job));
    add(sec, logsPart(job));
    add(sec, gpusPart(job));
    add(sec, restartsPart(job));
    add(sec, ckptsPart(job));
    add(sec, failuresPart(job));
    add(sec, preflightPart(job));
    return sec;
  }

  /* --- the loop -------------------------------------------------------------------------- */
  function setConn(word, text) {
    var c = document.getElementById('conn');
    c.className = 'pill s-' + word;
    clear(c);
    add(c, text);
  }

  function render(doc) {
    var main = document.getElementById('jobs');
    var jobs = Array.isArray(doc.jobs) ? doc.jobs : [];
    var frag = document.createDocumentFragment();
    lastJobs = {};
    jobs.forEach(function (j) { lastJobs[j.id] = j; frag.appendChild(jobPart(j)); });
    if (jobs.length === 0) frag.appendChild(el('p', 'empty', 'no jobs'));
    clear(main);
    main.appendChild(frag);
    var s = doc.server || {};
    var sum = document.getElementById('summary');
    clear(sum);
    add(sum, plural(s.jobs, 'job') + ' · ' + plural(s.connections, 'connection') + ' · up ' +
      dur(s.uptime_s) + (doc.truncated ? ' · details left out (too large)' : ''));
    /* forget sparklines of GPUs not seen for a minute */
    var now = Date.now();
    Object.keys(sparks).forEach(function (k) {
      if (now - sparks[k].seen > 60000) delete sparks[k];
    });
  }

  function showLogin(msg) {
    var f = document.getElementById('login');
    f.hidden = false;
    if (msg) {
      var m = document.getElementById('login-msg');
      clear(m);
      add(m, msg);
    }
  }

  function poll() {
    var headers = {};
    var cred = sessionStorage.getItem(KEY);
    if (cred) headers.Authorization = 'Bearer ' + cred;
    fetch('/status', {headers: headers, cache: 'no-store', credentials: 'omit'})
      .then(function (r) {
        if (r.status === 401) {
          setConn('bad', 'credential needed');
          showLogin(cred ? 'That credential was refused: give an observer credential ' +
            '(muster token --read-only).' : null);
          return null;
        }
        if (r.status === 403) {
          setConn('bad', 'not served');
          showLogin('This server has no token, so no observer credential exists: it serves ' +
            '/status only when started with --http-public-status.');
          return null;
        }
        if (!r.ok) throw new Error('HTTP ' + r.status);
        return r.json();
      })
      .then(function (doc) {
        if (doc === null) return;
        document.getElementById('login').hidden = true;
        lastOk = Date.now();
        setConn('live', 'live');
        render(doc);
        Object.keys(logs).forEach(function (id) {
          if (lastJobs[id]) fetchLogs(id);
          else delete logs[id]; /* a job gone from the server: forget its panel */
        });
      })
      .catch(function (e) {
        setConn(lastOk ? 'stale' : 'bad', 'no answer' + (lastOk ? ' for ' +
          dur((Date.now() - lastOk) / 1000) : '') + ' (' + e.message + ')');
      })
      .then(function () { timer = setTimeout(poll, POLL_MS); });
  }

  function start() {
    /* #cred=... (a fragment never reaches a server or a log): taken, then removed from the URL */
    var m = /(?:^#|&)cred=([^&]+)/.exec(location.hash);
    if (m) {
      sessionStorage.setItem(KEY, decodeURIComponent(m[1]));
      window.history.replaceState(null, '', location.pathname + location.search);
    }
    document.getElementById('login').addEventListener('submit', function (ev) {
      ev.preventDefault();
      var v = document.getElementById('cred').value.trim();
      if (v) sessionStorage.setItem(KEY, v);
      document.getElementById('cred').value = '';
      if (timer !== null) clearTimeout(timer);
      poll();
    });
    poll();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
