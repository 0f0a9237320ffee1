// The grid's bulk form (bulk_form.html): select cells to act on. With "select cells" checked a click on a
// cell toggles it and a shift-click selects every cell from the last one clicked; "select all shown" takes
// every cell with a ref. The selection is kept by ref, so it survives the live refresh (live.js replaces
// the grid's cells); on submit the refs go in the form's `refs` field, one a line, and the server shows
// the count its dry run reports before anything runs. Without JavaScript the form acts on the filter.
(function () {
  "use strict";
  var CELLS = '#grid [data-testid="grid-cell"][data-ref]';
  var selected = new Set();
  var anchor = null;

  function cells() { return Array.prototype.slice.call(document.querySelectorAll(CELLS)); }

  function show(form) {
    cells().forEach(function (cell) { cell.classList.toggle("selected", selected.has(cell.dataset.ref)); });
    var count = form.querySelector('[data-testid="bulk-count"]');
    if (count.getAttribute("data-count") !== String(selected.size)) {
      count.textContent = String(selected.size);
      count.setAttribute("data-count", String(selected.size));
    }
    form.querySelector('textarea[name="refs"]').value = Array.from(selected).join("\n");
  }

  function selectRange(from, to) {
    var all = cells().map(function (cell) { return cell.dataset.ref; });
    var a = all.indexOf(from);
    var b = all.indexOf(to);
    if (a < 0 || b < 0) { selected.add(to); return; }
    all.slice(Math.min(a, b), Math.max(a, b) + 1).forEach(function (ref) { selected.add(ref); });
  }

  function onCellClick(form, mode, event) {
    var cell = event.target.closest(CELLS);
    if (!cell || !mode.checked) { return; }
    event.preventDefault();  // selecting, not following the cell's link
    var ref = cell.dataset.ref;
    if (event.shiftKey && anchor !== null) {
      selectRange(anchor, ref);
    } else if (selected.has(ref)) {
      selected.delete(ref);
    } else {
      selected.add(ref);
    }
    anchor = ref;
    form.querySelector('[data-testid="bulk-scope-refs"]').checked = true;
    show(form);
  }

  function wire(form) {
    var mode = form.querySelector('[data-testid="bulk-select-mode"]');
    form.querySelector('[data-testid="bulk-tools"]').hidden = false;
    mode.addEventListener("change", function () { document.body.classList.toggle("selecting", mode.checked); });
    document.addEventListener("click", function (event) { onCellClick(form, mode, event); });
    form.querySelector('[data-testid="bulk-select-all"]').addEventListener("click", function () {
      cells().forEach(function (cell) { selected.add(cell.dataset.ref); });
      form.querySelector('[data-testid="bulk-scope-refs"]').checked = true;
      show(form);
    });
    form.querySelector('[data-testid="bulk-clear"]').addEventListener("click", function () {
      selected.clear();
      anchor = null;
      show(form);
    });
    form.addEventListener("submit", function () { show(form); });
    // live.js swaps the grid's region (a child of #main) for a fresh one: mark the selected cells again.
    new MutationObserver(function () { show(form); }).observe(document.getElementById("main"), { childList: true });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var form = document.getElementById("bulk-form");
    if (form && document.querySelector("#grid")) { wire(form); }
  });
})();
