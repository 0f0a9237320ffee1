// The want form: show only the fields of the chosen mode (one ref, a list, a range). Without
// JavaScript every field shows and the server reads those of the checked mode.
(function () {
  "use strict";
  function update(form) {
    var checked = form.querySelector('input[name="mode"]:checked');
    var mode = checked ? checked.value : "one";
    ["one", "list", "range"].forEach(function (name) {
      form.querySelectorAll(".mode-" + name).forEach(function (part) { part.hidden = name !== mode; });
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    var form = document.getElementById("want-form");
    if (!form) { return; }
    form.addEventListener("change", function (event) {
      if (event.target.name === "mode") { update(form); }
    });
    update(form);
  });
})();
