// The lineage graph of an instance page: fetch GET /api/v1/instances/{uuid}/lineage, lay it out
// left to right with dagre (vendor/), draw it as SVG. Each node links to its instance page (keeping
// the time travel) and, when checks were recorded on it, a badge of their worst result (passed, warning,
// failed, errored); changing direction or depth redraws without a reload. The job graph page
// (#lineage[data-kind=graph], GET /api/v1/graph) is drawn the same way: a node per job or source
// (its name is its id, its counts by state and stale count its second line, a job's declared checks and
// reactions a third) linking to its grid (data-link-base); an edge the graph declares but no known partition
// shows yet is dashed (data-declared, data-in-log).
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var NODE_H = 40, EXTRA_H = 16, CHAR_W = 7.2, PAD = 12, BADGE_W = 16;
  // The worst result of a node's checks (null: none recorded), as a letter on a coloured square.
  var BADGE_TEXT = { passed: "\u2713", warning: "!", failed: "\u2717", errored: "E" };

  function el(name, attrs, parent) {
    var node = document.createElementNS(SVG, name);
    Object.keys(attrs).forEach(function (key) { node.setAttribute(key, attrs[key]); });
    if (parent) { parent.appendChild(node); }
    return node;
  }

  function status(box, state, text, extra) {
    var line = box.querySelector("#lineage-status");
    line.setAttribute("data-state", state);
    line.textContent = text;
    Object.keys(extra || {}).forEach(function (key) { line.setAttribute("data-" + key, extra[key]); });
  }

  // The job graph's answer in the lineage's shape: nodes by name, edges from producer to reader.
  function asLineage(data) {
    function of(list, name) { return (list || []).filter(function (item) { return item.job === name; }); }
    return {
      root: null, as_of_seq: data.as_of_seq,
      nodes: data.nodes.map(function (node) {
        var counts = Object.keys(node.counts).map(function (k) { return k.replace(/_/g, " ") + " " + node.counts[k]; });
        var worst = ["failed", "upstream_failed", "tainted", "warning", "building", "missing"].filter(function (k) { return node.counts[k]; })[0];
        var checks = of(data.checks, node.name).map(function (c) { return c.name + (c.blocking ? "" : " (warn)"); });
        var reactions = of(data.reactions, node.name).map(function (r) {
          return r.kind.replace(/^on_/, "").replace(/_/g, " ") + (r.debounce_ms ? " " + r.debounce_ms / 1000 + "s" : "");
        });
        var extra = [checks.length ? "checks: " + checks.join(", ") : "", reactions.length ? "reacts: " + reactions.join(", ") : ""];
        return { uuid: node.name, ref: node.name, state: worst || (node.total ? "live" : "none"), depth: 0,
                 sub: node.kind + " · " + (counts.join(", ") || "no partitions") + (node.stale ? " · stale " + node.stale : ""),
                 counts: counts.join(","), stale: node.stale === null || node.stale === undefined ? "" : String(node.stale),
                 extra: extra.filter(Boolean).join(" · "), checks: checks.join(","), reactions: reactions.join(",") };
      }),
      edges: data.edges
    };
  }

  function layout(data) {
    var g = new dagre.graphlib.Graph({ multigraph: false });
    // tight-tree ranking: lineage is layered already (a job's outputs one rank after its inputs), so
    // network simplex's extra passes rarely move a node; on 300 nodes it takes 0.73x the layout time.
    g.setGraph({ rankdir: "LR", nodesep: 14, ranksep: 60, marginx: 10, marginy: 10, ranker: "tight-tree" });
    g.setDefaultEdgeLabel(function () { return {}; });
    data.nodes.forEach(function (node) {
      var label = node.ref === null ? "dropped " + node.uuid.slice(0, 8) : node.ref;
      // Room for the check badge at the right end (it never covers the label).
      var badge = node.check_result ? BADGE_W + 4 : 0;
      // The box fits the longer of its two lines (a job's counts can be longer than its name).
      var chars = Math.max(label.length, node.sub ? node.sub.length : 0, node.extra ? node.extra.length : 0);
      var width = Math.min(420, Math.max(120, chars * CHAR_W + 2 * PAD)) + badge;
      g.setNode(node.uuid, { width: width, height: NODE_H + (node.extra ? EXTRA_H : 0), label: label, node: node });
    });
    data.edges.forEach(function (edge) {
      if (g.hasNode(edge.input) && g.hasNode(edge.output)) { g.setEdge(edge.input, edge.output, { edge: edge }); }
    });
    dagre.layout(g);
    return g;
  }

  function drawNode(svg, g, id, root, suffix) {
    var box = g.node(id), node = box.node, state = node.state || "dropped";
    var group = el("g", {
      "class": "node s-" + state + (id === root ? " root" : ""), "data-testid": "lineage-node",
      "data-uuid": id, "data-ref": node.ref === null ? "" : node.ref, "data-state": state,
      "transform": "translate(" + (box.x - box.width / 2) + "," + (box.y - box.height / 2) + ")"
    }, svg);
    var base = document.getElementById("lineage").getAttribute("data-link-base") || "/instances/";
    // Without a served graph, source data is named after its refs' path: its partitions list, not a grid.
    var href = base === "/jobs/" && id.indexOf("/") >= 0
      ? "/partitions?prefix=" + encodeURIComponent(id + "/") + suffix.replace(/^\?/, "&")
      : base + encodeURIComponent(id) + suffix;
    var link = el("a", { "href": href }, group);
    if (node.counts !== undefined) {
      group.setAttribute("data-counts", node.counts);
      ["stale", "checks", "reactions"].forEach(function (key) { group.setAttribute("data-" + key, node[key]); });
    }
    el("rect", { "width": box.width, "height": box.height, "rx": 4 }, link);
    var title = el("text", { "x": PAD, "y": 16 }, link);
    title.textContent = box.label.length > 56 ? box.label.slice(0, 55) + "…" : box.label;
    var sub = el("text", { "class": "sub", "x": PAD, "y": 32 }, link);
    // A superseded Live node is an older version: its location may hold other data now.
    var stateText = state.replace(/_/g, " ") + (node.superseded ? " (superseded)" : "");
    sub.textContent = node.sub || stateText + " · " + id.slice(0, 8);
    if (node.extra) {
      var extra = el("text", { "class": "sub", "x": PAD, "y": 32 + EXTRA_H, "data-testid": "job-declarations" }, link);
      extra.textContent = node.extra.length > 56 ? node.extra.slice(0, 55) + "…" : node.extra;
    }
    if (node.superseded) { group.setAttribute("class", group.getAttribute("class") + " superseded"); }
    group.setAttribute("data-superseded", node.superseded ? "true" : "false");
    if (node.check_result) {
      var badge = el("g", { "class": "badge c-" + node.check_result, "data-testid": "lineage-check",
        "data-result": node.check_result, "transform": "translate(" + (box.width - BADGE_W - 6) + ",6)" }, link);
      el("rect", { "width": BADGE_W, "height": BADGE_W, "rx": 3 }, badge);
      el("text", { "x": BADGE_W / 2, "y": 12 }, badge).textContent = BADGE_TEXT[node.check_result] || "?";
      el("title", {}, badge).textContent = "checks: " + node.check_result;
    }
    group.setAttribute("data-check", node.check_result || "");
    el("title", {}, group).textContent = box.label + (node.check_result ? " (checks: " + node.check_result + ")" : "");
  }

  function draw(box, data) {
    var started = performance.now();
    var svg = box.querySelector("#lineage-graph");
    while (svg.firstChild) { svg.removeChild(svg.firstChild); }
    var g = layout(data), size = g.graph();
    svg.setAttribute("width", Math.max(size.width, 100));
    svg.setAttribute("height", Math.max(size.height, 50));
    var defs = el("defs", {}, svg);
    var marker = el("marker", { "id": "arrow", "viewBox": "0 0 10 10", "refX": 10, "refY": 5,
      "markerWidth": 7, "markerHeight": 7, "orient": "auto-start-reverse" }, defs);
    el("path", { "class": "arrow", "d": "M 0 0 L 10 5 L 0 10 z" }, marker);
    g.edges().forEach(function (e) {
      var drawn = g.edge(e), points = drawn.points.map(function (p) { return p.x + "," + p.y; });
      var path = el("path", { "class": "edge", "d": "M" + points.join(" L"), "marker-end": "url(#arrow)",
        "data-testid": "lineage-edge", "data-input": e.v, "data-output": e.w }, svg);
      var edge = drawn.edge;
      if (edge && edge.declared !== undefined) {  // the job graph's: declared, seen in the log, or both
        path.setAttribute("data-declared", String(edge.declared));
        path.setAttribute("data-in-log", String(edge.in_log));
        if (!edge.in_log) { path.setAttribute("stroke-dasharray", "5 4"); }
        el("title", {}, path).textContent = e.v + " → " + e.w + (edge.in_log ? "" : " (declared; no known partition shows it yet)");
      }
    });
    var suffix = box.getAttribute("data-link-suffix") || "";
    g.nodes().forEach(function (id) { drawNode(svg, g, id, data.root, suffix); });
    // A wide fan-in stacks the inputs high: open with the root in view, not the first inputs.
    var root = g.node(data.root);
    if (root) {
      box.scrollTop = Math.max(0, root.y - box.clientHeight / 2);
      box.scrollLeft = Math.max(0, root.x - box.clientWidth / 2);
    }
    var what = box.getAttribute("data-kind") === "graph" ? " jobs and sources, " : " instances, ";
    status(box, "drawn", data.nodes.length + what + g.edges().length + " edges (as of seq " + data.as_of_seq + ")",
      { nodes: data.nodes.length, edges: g.edges().length, ms: Math.round(performance.now() - started) });
  }

  function load(box) {
    var params = new URLSearchParams({ direction: box.getAttribute("data-direction"), depth: box.getAttribute("data-depth") });
    var asOf = box.getAttribute("data-as-of");
    if (asOf) { params.set("as_of_seq", asOf); }
    status(box, "pending", "Drawing the graph…");
    fetch(box.getAttribute("data-api") + "?" + params.toString(), { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (response) {
        return response.json().then(function (body) {
          if (!response.ok) { throw new Error(body.detail || response.statusText); }
          return body;
        });
      })
      .then(function (data) { draw(box, box.getAttribute("data-kind") === "graph" ? asLineage(data) : data); })
      .catch(function (error) { status(box, "error", "Could not draw the lineage: " + error.message); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var box = document.getElementById("lineage");
    if (!box || typeof dagre === "undefined") { return; }
    var controls = document.getElementById("lineage-controls");
    if (controls) {
      controls.addEventListener("change", function () {
        var direction = controls.elements.direction.value, depth = controls.elements.depth.value || "0";
        // A change event with nothing changed (the browser's own, when a field edited and already applied
        // loses focus, e.g. to a click on a node) must not redraw: it would replace the node under the click.
        if (direction === box.getAttribute("data-direction") && depth === box.getAttribute("data-depth")) { return; }
        box.setAttribute("data-direction", direction);
        box.setAttribute("data-depth", depth);
        var url = new URL(window.location.href);
        url.searchParams.set("direction", direction);
        url.searchParams.set("depth", depth);
        window.history.replaceState(null, "", url.toString());
        load(box);
      });
    }
    load(box);
  });
})();
