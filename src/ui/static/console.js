// batchgate console: keyboard shortcuts only (the pages work without it).
//   /        focus the search box
//   g then o/d/b/a/r   go to Overview, Datasets, Batches, Alerts, Repairs
//   Escape   leave the search box
(function () {
  "use strict";
  var pending = false;
  var timer = null;
  function typing(el) {
    return el && (el.tagName === "INPUT" || el.tagName === "TEXTAREA" || el.tagName === "SELECT" || el.isContentEditable);
  }
  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    var q = document.getElementById("q");
    if (typing(e.target)) {
      if (e.key === "Escape" && e.target === q) q.blur();
      return;
    }
    if (e.key === "/" && q) {
      e.preventDefault();
      q.focus();
      q.select();
      return;
    }
    if (pending) {
      pending = false;
      clearTimeout(timer);
      var link = document.querySelector('nav a[data-key="' + e.key + '"]');
      if (link) {
        e.preventDefault();
        window.location.assign(link.getAttribute("href"));
      }
      return;
    }
    if (e.key === "g") {
      pending = true;
      timer = setTimeout(function () { pending = false; }, 1500);
    }
  });
})();
