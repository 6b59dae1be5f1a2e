// The full-size view: zoom (buttons, + - 0, Ctrl+wheel) and ← / → through the results it was
// opened from (the list a result page remembered in sessionStorage), Esc back to that page.
(function () {
  "use strict";
  var frame = document.getElementById("viewer-frame");
  var picture = document.getElementById("full");
  if (!frame || !picture) { return; }
  var level = document.getElementById("zoom-level");
  var zoom = 0; // 0: fit the window; otherwise the scale of the natural size
  function apply() {
    if (zoom === 0) {
      frame.classList.add("fit");
      picture.style.width = "";
      level.textContent = "fit";
    } else {
      frame.classList.remove("fit");
      picture.style.width = Math.round(picture.naturalWidth * zoom) + "px";
      level.textContent = Math.round(zoom * 100) + " %";
    }
  }
  function current() {
    if (zoom !== 0) { return zoom; }
    return picture.naturalWidth ? picture.clientWidth / picture.naturalWidth : 1;
  }
  function zoomBy(factor) {
    zoom = Math.min(16, Math.max(0.05, current() * factor));
    apply();
  }
  document.getElementById("zoom-in").addEventListener("click", function () { zoomBy(1.5); });
  document.getElementById("zoom-out").addEventListener("click", function () { zoomBy(1 / 1.5); });
  document.getElementById("zoom-fit").addEventListener("click", function () { zoom = 0; apply(); });
  frame.addEventListener("wheel", function (event) {
    if (!event.ctrlKey) { return; }
    event.preventDefault();
    zoomBy(event.deltaY < 0 ? 1.25 : 0.8);
  }, { passive: false });

  var list = null;
  try { list = JSON.parse(sessionStorage.getItem("galleria.results") || "null"); } catch (error) { list = null; }
  var here = window.location.pathname;
  var at = list && Array.isArray(list.views) ? list.views.indexOf(here) : -1;
  var previous = document.getElementById("view-prev"), next = document.getElementById("view-next");
  var back = document.getElementById("view-back");
  if (at >= 0) {
    if (at > 0) { previous.href = list.views[at - 1]; previous.hidden = false; }
    if (at + 1 < list.views.length) { next.href = list.views[at + 1]; next.hidden = false; }
    if (typeof list.back === "string" && list.back.charAt(0) === "/" && list.back.charAt(1) !== "/") {
      back.href = list.back; back.hidden = false;
    }
  }
  document.addEventListener("keydown", function (event) {
    if (event.target && /^(INPUT|TEXTAREA|SELECT)$/.test(event.target.tagName)) { return; }
    if (event.key === "ArrowLeft" && !previous.hidden) { window.location.href = previous.href; }
    else if (event.key === "ArrowRight" && !next.hidden) { window.location.href = next.href; }
    else if (event.key === "Escape" && !back.hidden) { window.location.href = back.href; }
    else if (event.key === "+" || event.key === "=") { zoomBy(1.5); }
    else if (event.key === "-") { zoomBy(1 / 1.5); }
    else if (event.key === "0") { zoom = 0; apply(); }
  });
})();
