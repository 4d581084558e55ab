// steerdns real user measurements beacon (docs/rum.md). Embed it with one tag:
//   <script async src="https://rum.example.com/rum/v1/beacon.js"></script>
// It reads the measurement URLs from the same place, fetches each once (with a
// cache-buster, without cookies), times it with the Resource Timing API, and sends the
// times in one report. Nothing happens while the page is hidden.
(function () {
  'use strict';
  var script = document.currentScript;
  if (!script || !window.fetch || !window.performance || !performance.getEntriesByName) {
    return;
  }
  var base = new URL('.', script.src);
  var configUrl = new URL('config', base).href;
  var reportUrl = new URL('report', base).href;

  function whenVisible(fn) {
    if (document.visibilityState !== 'hidden') {
      fn();
      return;
    }
    document.addEventListener('visibilitychange', function wait() {
      if (document.visibilityState !== 'hidden') {
        document.removeEventListener('visibilitychange', wait);
        fn();
      }
    });
  }

  function later(ms) {
    return new Promise(function (done) { setTimeout(done, ms); });
  }

  // The entry is recorded when the response ends, which may be after fetch resolves.
  function entryFor(url, tries) {
    var list = performance.getEntriesByName(url);
    if (list.length || tries <= 0) {
      return Promise.resolve(list[list.length - 1]);
    }
    return later(50).then(function () { return entryFor(url, tries - 1); });
  }

  function measure(target) {
    var url = new URL(target.url, location.href);
    url.searchParams.set('rum', Date.now().toString(36) + Math.random().toString(36).slice(2));
    var href = url.href;
    var started = performance.now();
    return fetch(href, {
      mode: 'no-cors', credentials: 'omit', cache: 'no-store', referrerPolicy: 'no-referrer'
    }).then(function () {
      var fallback = performance.now() - started;
      return entryFor(href, 20).then(function (entry) {
        var ms = entry && entry.duration > 0 ? entry.duration : fallback;
        return { region: target.region, ms: Math.max(0.1, Math.round(ms * 10) / 10) };
      });
    }, function () { return null; });
  }

  function send(list) {
    var body = JSON.stringify({ v: 1, m: list });
    // A string body goes as text/plain: no CORS preflight.
    if (navigator.sendBeacon && navigator.sendBeacon(reportUrl, body)) {
      return;
    }
    fetch(reportUrl, {
      method: 'POST', body: body, keepalive: true, credentials: 'omit', mode: 'no-cors',
      headers: { 'Content-Type': 'text/plain' }
    }).catch(function () {});
  }

  function run() {
    fetch(configUrl, { credentials: 'omit' }).then(function (r) {
      return r.ok ? r.json() : { targets: [] };
    }).then(function (config) {
      var measured = [];
      // One at a time, so that the fetches do not slow each other down.
      return (config.targets || []).reduce(function (done, target) {
        return done.then(function () {
          return measure(target).then(function (m) { if (m) { measured.push(m); } });
        });
      }, Promise.resolve()).then(function () {
        if (measured.length) {
          whenVisible(function () { send(measured); });
        }
      });
    }).catch(function () {});
  }

  whenVisible(run);
})();
