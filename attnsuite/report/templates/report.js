// The report's only script: the filter bar, links that reveal their case, and copy buttons.
// The page is complete without it (every row is in the HTML); this only hides and shows.
(function () {
  "use strict";
  var bar = document.getElementById("filters");
  var selects = Array.prototype.slice.call(bar.querySelectorAll("select[data-dim]"));
  var rows = Array.prototype.slice.call(document.querySelectorAll("[data-row]"));
  var groups = Array.prototype.slice.call(document.querySelectorAll("[data-group]"));
  var status = document.getElementById("filter-status");
  var expand = document.getElementById("expand-passing");

  function wanted() {
    var w = {};
    selects.forEach(function (s) { if (s.value) { w[s.dataset.dim] = s.value; } });
    return w;
  }

  function apply() {
    var w = wanted(), dims = Object.keys(w), shown = 0;
    rows.forEach(function (row) {
      var ok = dims.every(function (d) { return row.dataset[d] === w[d]; });
      row.hidden = !ok;
      if (ok) { shown += 1; }
    });
    // A family block whose rows are all hidden goes too, heading and charts included.
    groups.forEach(function (g) {
      var own = g.querySelectorAll("[data-row]");
      g.hidden = own.length > 0 && !g.querySelector("[data-row]:not([hidden])");
    });
    // Folded tables say how many of their rows the filter leaves, and a filter on the
    // outcome opens them: its rows are what was asked for.
    document.querySelectorAll("details.fold").forEach(function (d) {
      var total = d.querySelectorAll("[data-row]").length;
      var left = d.querySelectorAll("[data-row]:not([hidden])").length;
      var count = d.querySelector(".fold-count");
      if (count) { count.textContent = dims.length ? left + " of " + total : String(total); }
      if (w.outcome && left) { d.open = true; }
    });
    status.textContent = dims.length ? shown + " of " + rows.length + " rows match" : "";
    bar.dataset.active = dims.length ? "1" : "";
  }

  function setFrom(params) {
    selects.forEach(function (s) {
      var v = params.get(s.dataset.dim) || "";
      var known = Array.prototype.some.call(s.options, function (o) { return o.value === v; });
      s.value = known ? v : "";
    });
    apply();
  }

  function remember() {
    var q = new URLSearchParams(wanted()).toString();
    try {
      history.replaceState(null, "", (q ? "?" + q : location.pathname) + location.hash);
    } catch (e) { /* file:// in some browsers: the filter still applies, the URL just stays */ }
  }

  function reveal(id) {
    var el = id && document.getElementById(id);
    if (!el) { return; }
    if (el.closest("[hidden]")) { selects.forEach(function (s) { s.value = ""; }); apply(); remember(); }
    for (var p = el.parentElement; p; p = p.parentElement) {
      if (p.tagName === "DETAILS") { p.open = true; }
    }
    el.classList.add("flash");
    setTimeout(function () { el.classList.remove("flash"); }, 2500);
  }

  selects.forEach(function (s) { s.addEventListener("change", function () { apply(); remember(); }); });
  document.getElementById("filter-reset").addEventListener("click", function () {
    selects.forEach(function (s) { s.value = ""; });
    apply();
    remember();
  });
  expand.addEventListener("click", function () {
    var folds = document.querySelectorAll("details.passing");
    var open = expand.dataset.open !== "1";
    folds.forEach(function (d) { d.open = open; });
    expand.dataset.open = open ? "1" : "";
    expand.textContent = open ? "fold passing cases" : "show passing cases";
  });

  document.addEventListener("click", function (ev) {
    var a = ev.target.closest && ev.target.closest("a[href]");
    if (!a) { return; }
    var href = a.getAttribute("href");
    if (href.charAt(0) === "?") {  // a count: filter to its rows instead of reloading
      ev.preventDefault();
      setFrom(new URLSearchParams(href.slice(1)));
      remember();
      document.getElementById("cases").scrollIntoView();
    } else if (href.charAt(0) === "#") {  // a case: open what hides it, then let the link scroll
      reveal(decodeURIComponent(href.slice(1)));
    }
  });
  window.addEventListener("hashchange", function () {
    reveal(decodeURIComponent(location.hash.slice(1)));
    var el = document.getElementById(decodeURIComponent(location.hash.slice(1)));
    if (el) { el.scrollIntoView(); }
  });

  document.querySelectorAll(".repro").forEach(function (box) {
    var button = box.querySelector("button.copy"), code = box.querySelector("code");
    button.hidden = false;
    button.addEventListener("click", function () {
      var text = code.textContent;
      function done() { button.textContent = "copied"; setTimeout(function () { button.textContent = "copy"; }, 1500); }
      function fallback() {
        var range = document.createRange();
        range.selectNodeContents(code);
        var sel = window.getSelection();
        sel.removeAllRanges();
        sel.addRange(range);
        try { document.execCommand("copy"); done(); } catch (e) { /* the text stays selected */ }
      }
      if (navigator.clipboard && navigator.clipboard.writeText) {
        navigator.clipboard.writeText(text).then(done, fallback);
      } else {
        fallback();
      }
    });
  });

  bar.hidden = false;
  setFrom(new URLSearchParams(location.search));
  if (location.hash) {
    reveal(decodeURIComponent(location.hash.slice(1)));
    var target = document.getElementById(decodeURIComponent(location.hash.slice(1)));
    if (target) { target.scrollIntoView(); }
  }
}());
