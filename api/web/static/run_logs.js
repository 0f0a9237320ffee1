// The run page's log panel: fetches the run's log lines from the API (the session cookie authenticates
// the read) and appends them; while the run is active it keeps asking with `follow` (a long poll), so a
// line the job logs after the page was opened shows up within a second. Lines are set as text, never
// as HTML: a job's log cannot inject markup.
(function () {
  "use strict";
  var PAGE = 1000;
  var FOLLOW_S = 20;
  var RETRY_MS = 2000;
  function start(panel) {
    var url = panel.getAttribute("data-logs-url");
    var follow = panel.getAttribute("data-follow") === "on";
    var lines = panel.querySelector("[data-testid=run-log-lines]");
    var status = panel.querySelector("[data-testid=run-log-status]");
    var after = 0;
    function show(page) {
      page.lines.forEach(function (line) {
        var row = document.createElement("div");
        row.className = "run-log-line level-" + line.level.toLowerCase();
        row.setAttribute("data-testid", "run-log-line");
        row.setAttribute("data-line-no", String(line.line_no));
        var number = document.createElement("span");
        number.className = "muted";
        number.textContent = line.line_no + " " + new Date(line.time_ms).toISOString().slice(11, 23) + " ";
        var text = document.createElement("span");
        text.textContent = line.level + " " + line.text;
        row.appendChild(number);
        row.appendChild(text);
        lines.appendChild(row);
      });
      after = page.next_after;
    }
    function next() {
      var query = "?after=" + after + "&limit=" + PAGE + (follow ? "&follow=" + FOLLOW_S : "");
      fetch(url + query, { credentials: "same-origin", headers: { "Accept": "application/json" } })
        .then(function (response) {
          if (!response.ok) {
            throw new Error("HTTP " + response.status);
          }
          return response.json();
        })
        .then(function (page) {
          show(page);
          var more = page.lines.length === PAGE;
          if (more || (follow && page.active)) {
            status.textContent = page.active ? "following the run…" : "loading…";
            next();
          } else {
            status.textContent = after === 0 ? "no lines logged" : (page.active ? "" : "the run has ended");
          }
        })
        .catch(function (error) {
          status.textContent = "could not load the log (" + error.message + "): trying again";
          window.setTimeout(next, RETRY_MS);
        });
    }
    next();
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-logs-url]").forEach(start);
  });
})();
