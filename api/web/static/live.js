// Live refresh: re-fetch this page's main fragment every few seconds and swap the regions marked
// data-live-id, so lists and states follow the builds without a reload. Off while time travelling
// (body[data-live=off]: the past does not change) and while the tab is hidden.
(function () {
  "use strict";
  var PERIOD_MS = 3000;
  function fragmentUrl() {
    var url = new URL(window.location.href);
    url.searchParams.set("fragment", "main");
    return url.toString();
  }
  function swap(html) {
    var fresh = new DOMParser().parseFromString("<div>" + html + "</div>", "text/html");
    fresh.querySelectorAll("[data-live-id]").forEach(function (region) {
      var id = region.getAttribute("data-live-id");
      var current = document.querySelector('[data-live-id="' + CSS.escape(id) + '"]');
      if (current && current.innerHTML !== region.innerHTML) {
        current.replaceWith(document.importNode(region, true));
      }
    });
  }
  function tick() {
    if (document.body.getAttribute("data-live") !== "on" || document.hidden) {
      return;
    }
    fetch(fragmentUrl(), { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) { if (html !== null) { swap(html); } })
      .catch(function () { /* the server may be restarting: try again next tick */ });
  }
  document.addEventListener("DOMContentLoaded", function () {
    if (document.body.getAttribute("data-live") === "on" && document.querySelector("[data-live-id]")) {
      window.setInterval(tick, PERIOD_MS);
    }
  });
})();
