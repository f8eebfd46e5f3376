// streamq dashboard: live refresh of a page's #live part, and confirmation
// of single destructive actions. No inline script, no dependencies.
(function () {
  "use strict";

  // Ask before the forms that say so (data-confirm).
  document.addEventListener("submit", function (e) {
    var msg = e.target.getAttribute && e.target.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) {
      e.preventDefault();
    }
  });

  var live = document.getElementById("live");
  if (!live) {
    return;
  }
  var url = live.getAttribute("data-refresh");
  var every = parseInt(live.getAttribute("data-refresh-ms"), 10);
  if (!url || !(every >= 1000)) {
    return;
  }
  var status = document.getElementById("live-status");
  var busy = false;

  // busyUser reports whether refreshing now would disturb the user: a field
  // of the live part has focus or a box in it is ticked.
  function busyUser() {
    var a = document.activeElement;
    if (a && a !== document.body && live.contains(a) && a.tagName !== "A") {
      return true;
    }
    return live.querySelector("input:checked") !== null;
  }

  function refresh() {
    if (busy || document.hidden || busyUser()) {
      return;
    }
    busy = true;
    fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) {
        if (!r.ok) {
          throw new Error("HTTP " + r.status);
        }
        return r.text();
      })
      .then(function (html) {
        // The fragment comes from this dashboard's own templates, escaped
        // server-side; the CSP forbids inline script anyway.
        live.innerHTML = html;
        live.setAttribute("data-refreshed", String(Date.now()));
        if (status) {
          status.textContent = "live, updated " + new Date().toLocaleTimeString();
          status.classList.remove("stale");
        }
      })
      .catch(function (err) {
        if (status) {
          status.textContent = "refresh failed (" + err.message + "), retrying";
          status.classList.add("stale");
        }
      })
      .finally(function () {
        busy = false;
      });
  }

  window.setInterval(refresh, every);
  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) {
      refresh();
    }
  });
})();
