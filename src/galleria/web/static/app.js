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
