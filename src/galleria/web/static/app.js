// Small helpers for the page's forms: no build step, no framework, no inline script (CSP 'self').
(function () {
  "use strict";
  var form = document.getElementById("query");
  function sync() {
    ["expand", "rerank"].forEach(function (name) {
      var box = document.getElementById(name);
      document.querySelectorAll('[data-needs="' + name + '"]').forEach(function (input) {
        input.disabled = !box.checked;
      });
    });
  }
  if (form) {
    ["expand", "rerank"].forEach(function (name) {
      document.getElementById(name).addEventListener("change", sync);
    });
    var image = document.getElementById("image");
    var text = document.getElementById("text");
    // The query being shown (a gallery image or an earlier upload) is searched again with the new
    // settings, unless a new image or a new text replaces it.
    var current = document.getElementById("current");
    function replaced() {
      if (current) { current.remove(); current = null; }
    }
    image.addEventListener("change", function () {
      replaced();
      if (text) { text.value = ""; }
    });
    if (text) {
      text.addEventListener("input", replaced);
    }
    form.addEventListener("submit", function () {
      // Empty and disabled fields are not sent; the server falls back to its defaults for them.
      if (text && !text.value) { text.disabled = true; }
      if (!image.files.length) { image.disabled = true; }
    });
    sync();
  }
  // Browsing: choosing a class folder shows it at once.
  var folder = document.getElementById("folder");
  if (folder) {
    folder.addEventListener("change", function () { folder.form.submit(); });
  }
})();
// Result lists: opening an image's full-size view remembers its list, so that the view steps
// through it with the arrow keys and Esc comes back here.
(function () {
  "use strict";
  document.addEventListener("click", function (event) {
    var link = event.target.closest ? event.target.closest("a.view-link") : null;
    if (!link) { return; }
    var list = link.closest("ol");
    var views = Array.prototype.map.call(list ? list.querySelectorAll("a.view-link") : [link], function (a) {
      return a.getAttribute("href");
    });
    try {
      sessionStorage.setItem("galleria.results", JSON.stringify({
        views: views, back: window.location.pathname + window.location.search
      }));
    } catch (error) { /* storage refused: the view opens without the list */ }
  });
  // The duplicates view reloads itself while the groups are being found.
  if (document.getElementById("computing")) {
    setTimeout(function () { window.location.reload(); }, 1500);
  }
})();
