// Small helpers for the search form: no build step, no framework.
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
  ["expand", "rerank"].forEach(function (name) {
    document.getElementById(name).addEventListener("change", sync);
  });
  var image = document.getElementById("image");
  var text = document.getElementById("text");
  var path = document.getElementById("path");
  // A new image or text replaces the gallery image being searched.
  image.addEventListener("change", function () {
    if (path) { path.remove(); path = null; }
    if (text) { text.value = ""; }
  });
  if (text) {
    text.addEventListener("input", function () {
      if (path) { path.remove(); path = null; }
    });
  }
  form.addEventListener("submit", function () {
    // Disabled fields are not sent; the server falls back to its defaults for them.
    if (text && !text.value) { text.disabled = true; }
    if (!image.files.length) { image.disabled = true; }
  });
  sync();
})();
