// The gallery's map: every image a point on a canvas (plain 2-D canvas, no library, no CDN).
// Points are drawn into one ImageData buffer (fast at 100,000 points); a grid of cells finds the
// point under the cursor; hovering shows its thumbnail, a click opens it with its neighbours, and a
// dragged rectangle lists the images inside it below the map, and links to the browse grid filtered by
// it (/?map=x0,y0,x1,y1).
(function () {
  "use strict";
  var canvas = document.getElementById("map");
  if (!canvas) { return; }
  var context = canvas.getContext("2d");
  var status = document.getElementById("map-status");
  var hover = document.getElementById("map-hover");
  var hoverImage = document.getElementById("map-hover-image");
  var hoverPath = document.getElementById("map-hover-path");
  var legend = document.getElementById("map-legend");
  var colourChoice = document.getElementById("colour");
  var SCALE = 65535, MARGIN = 8, CELL = 8, PICK = 6;
  var data = null, colours = null, screen = null, cells = null, base = null;
  var items = new Map(), hovered = -1, drag = null;

  function hue(i) { return (i * 137.508) % 360; }
  function rgb(h, s, l) {
    // HSL to packed ABGR (little-endian Uint32 view of RGBA bytes).
    s /= 100; l /= 100;
    var k = function (n) { return (n + h / 30) % 12; };
    var a = s * Math.min(l, 1 - l);
    var f = function (n) { return Math.round(255 * (l - a * Math.max(-1, Math.min(k(n) - 3, Math.min(9 - k(n), 1))))); };
    return (255 << 24) | (f(4) << 16) | (f(8) << 8) | f(0);
  }
  function css(packed) {
    return "rgb(" + (packed & 255) + "," + ((packed >> 8) & 255) + "," + ((packed >> 16) & 255) + ")";
  }

  function size() {
    // As wide as the page; as tall as the map's shape asks, within 240 px and 75 % of the window.
    var width = Math.max(200, Math.floor(canvas.parentElement.clientWidth));
    var aspect = 0.7;
    if (data && data.n > 1) {
      var minX = SCALE, maxX = 0, minY = SCALE, maxY = 0;
      for (var p = 0; p < data.n; p++) {
        minX = Math.min(minX, data.xy[2 * p]); maxX = Math.max(maxX, data.xy[2 * p]);
        minY = Math.min(minY, data.xy[2 * p + 1]); maxY = Math.max(maxY, data.xy[2 * p + 1]);
      }
      aspect = Math.max(1, maxY - minY) / Math.max(1, maxX - minX);
    }
    var height = Math.max(240, Math.min(Math.floor(width * aspect) + 2 * MARGIN, Math.floor(window.innerHeight * 0.75)));
    canvas.width = width; canvas.height = height;
  }

  function layout() {
    var n = data.n, xy = data.xy;
    var w = canvas.width - 2 * MARGIN, h = canvas.height - 2 * MARGIN;
    var minX = SCALE, maxX = 0, minY = SCALE, maxY = 0;
    for (var p = 0; p < n; p++) {
      minX = Math.min(minX, xy[2 * p]); maxX = Math.max(maxX, xy[2 * p]);
      minY = Math.min(minY, xy[2 * p + 1]); maxY = Math.max(maxY, xy[2 * p + 1]);
    }
    if (n === 0) { minX = maxX = minY = maxY = 0; }
    // One scale for both axes (the map keeps its shape), the points' extent centred.
    var s = Math.min(w / Math.max(1, maxX - minX), h / Math.max(1, maxY - minY));
    var ox = MARGIN + (w - s * (maxX - minX)) / 2 - s * minX, oy = MARGIN + (h - s * (maxY - minY)) / 2 - s * minY;
    screen = new Float32Array(2 * n);
    var columns = Math.ceil(canvas.width / CELL), rows = Math.ceil(canvas.height / CELL);
    var counts = new Int32Array(columns * rows + 1);
    for (var i = 0; i < n; i++) {
      var x = ox + xy[2 * i] * s, y = oy + xy[2 * i + 1] * s;
      screen[2 * i] = x; screen[2 * i + 1] = y;
      counts[Math.floor(y / CELL) * columns + Math.floor(x / CELL) + 1]++;
    }
    for (var c = 1; c < counts.length; c++) { counts[c] += counts[c - 1]; }
    var order = new Int32Array(n), fill = counts.slice();
    for (var j = 0; j < n; j++) {
      var cell = Math.floor(screen[2 * j + 1] / CELL) * columns + Math.floor(screen[2 * j] / CELL);
      order[fill[cell]++] = j;
    }
    cells = { columns: columns, rows: rows, start: counts, order: order };
    data.view = { s: s, ox: ox, oy: oy };
  }

  function draw() {
    var width = canvas.width, height = canvas.height;
    if (data.n <= 5000) {
      // Few points: round dots drawn by the canvas, biggest for the smallest maps.
      var radius = data.n > 1000 ? 2.5 : 4;
      context.fillStyle = "#fff";
      context.fillRect(0, 0, width, height);
      for (var k = 0; k < data.n; k++) {
        context.fillStyle = css(colours[k]);
        context.beginPath();
        context.arc(screen[2 * k], screen[2 * k + 1], radius, 0, 2 * Math.PI);
        context.fill();
      }
      base = context.getImageData(0, 0, width, height);
      overlay();
      return;
    }
    // Many points: written straight into one pixel buffer (fast at 100,000 points).
    var image = context.createImageData(width, height);
    var pixels = new Uint32Array(image.data.buffer);
    pixels.fill(0xffffffff);
    var half = data.n > 20000 ? 1 : 2;
    for (var i = 0; i < data.n; i++) {
      var cx = Math.round(screen[2 * i]), cy = Math.round(screen[2 * i + 1]), colour = colours[i];
      for (var dy = -half + 1; dy < half; dy++) {
        var y = cy + dy;
        if (y < 0 || y >= height) { continue; }
        for (var dx = -half + 1; dx < half; dx++) {
          var x = cx + dx;
          if (x >= 0 && x < width) { pixels[y * width + x] = colour; }
        }
      }
    }
    base = image;
    overlay();
  }

  function overlay() {
    context.putImageData(base, 0, 0);
    if (hovered >= 0) {
      context.strokeStyle = "#000"; context.lineWidth = 2;
      context.beginPath(); context.arc(screen[2 * hovered], screen[2 * hovered + 1], 6, 0, 2 * Math.PI); context.stroke();
    }
    if (drag && drag.moved) {
      context.strokeStyle = "#1f5fa8"; context.lineWidth = 1.5; context.setLineDash([5, 3]);
      context.strokeRect(drag.x0, drag.y0, drag.x1 - drag.x0, drag.y1 - drag.y0);
      context.setLineDash([]);
    }
  }

  function nearest(x, y) {
    var best = -1, bestDistance = PICK * PICK;
    var c0 = Math.floor((x - PICK) / CELL), c1 = Math.floor((x + PICK) / CELL);
    var r0 = Math.floor((y - PICK) / CELL), r1 = Math.floor((y + PICK) / CELL);
    for (var r = Math.max(0, r0); r <= Math.min(cells.rows - 1, r1); r++) {
      for (var c = Math.max(0, c0); c <= Math.min(cells.columns - 1, c1); c++) {
        var cell = r * cells.columns + c;
        for (var k = cells.start[cell]; k < cells.start[cell + 1]; k++) {
          var i = cells.order[k], dx = screen[2 * i] - x, dy = screen[2 * i + 1] - y, d = dx * dx + dy * dy;
          if (d <= bestDistance) { best = i; bestDistance = d; }
        }
      }
    }
    return best;
  }

  function item(row) {
    if (items.has(row)) { return items.get(row); }
    var request = fetch("/api/map/item/" + row).then(function (answer) {
      if (!answer.ok) { throw new Error("item " + row); }
      return answer.json();
    });
    items.set(row, request);
    if (items.size > 500) { items.delete(items.keys().next().value); }
    return request;
  }

  function colourBy(kind) {
    var n = data.n;
    colours = new Uint32Array(n);
    legend.textContent = "";
    if (kind === "duplicates" && data.group) {
      var grey = rgb(0, 0, 82);
      for (var i = 0; i < n; i++) { colours[i] = data.group[i] < 0 ? grey : rgb(hue(data.group[i]), 75, 42); }
      addLegend(rgb(0, 0, 82), "not a duplicate");
      addLegend(rgb(hue(0), 75, 42), data.groups + " duplicate groups (one colour each)");
    } else {
      for (var j = 0; j < n; j++) { colours[j] = rgb(hue(data.label[j]), 65, 45); }
      data.labels.slice(0, 40).forEach(function (name, k) { addLegend(rgb(hue(k), 65, 45), name || "(no label)"); });
      if (data.labels.length > 40) { addLegend(rgb(0, 0, 60), "… " + (data.labels.length - 40) + " more labels"); }
    }
    draw();
  }

  function addLegend(colour, text) {
    var entry = document.createElement("li");
    var swatch = document.createElement("span");
    swatch.className = "swatch";
    swatch.style.background = css(colour);
    entry.appendChild(swatch);
    entry.appendChild(document.createTextNode(text));
    legend.appendChild(entry);
  }

  function load(address, done) {
    fetch(address).then(function (answer) {
      if (answer.status === 202) { setTimeout(function () { load(address, done); }, 1000); return null; }
      if (!answer.ok) {
        return answer.json().then(function (body) { status.textContent = body.detail || "the map could not be loaded"; });
      }
      return answer.json().then(done);
    }).catch(function () { status.textContent = "the map could not be loaded"; });
  }

  function toMap(x, y) {
    var v = data.view;
    return [Math.round((x - v.ox) / v.s), Math.round((y - v.oy) / v.s)];  // map units (0..65535)
  }

  var regionPage = 1, region = null;
  function showRegion(page) {
    var a = toMap(Math.min(drag.x0, drag.x1), Math.min(drag.y0, drag.y1));
    var b = toMap(Math.max(drag.x0, drag.x1), Math.max(drag.y0, drag.y1));
    var clamp = function (v) { return Math.min(SCALE, Math.max(0, v)); };  // the map's units: 0..65535
    region = [clamp(a[0]), clamp(a[1]), clamp(b[0]), clamp(b[1])];
    fetchRegion(page);
  }
  function fetchRegion(page) {
    var query = "x0=" + region[0] + "&y0=" + region[1] + "&x1=" + region[2] + "&y1=" + region[3] + "&page=" + page;
    fetch("/api/map/region?" + query).then(function (answer) { return answer.json(); }).then(function (body) {
      regionPage = body.page;
      document.getElementById("region-browse").href = "/?map=" + region.join(",");
      var section = document.getElementById("map-region"), grid = document.getElementById("region-grid");
      section.hidden = false;
      document.getElementById("region-count").textContent = body.total + " image" + (body.total === 1 ? "" : "s") + " in the rectangle";
      document.getElementById("region-page").textContent = "page " + body.page + " of " + body.pages;
      document.getElementById("region-prev").disabled = body.page <= 1;
      document.getElementById("region-next").disabled = body.page >= body.pages;
      grid.textContent = "";
      body.items.forEach(function (entry) {
        var li = document.createElement("li"); li.className = "item";
        var link = document.createElement("a"); link.href = entry.search; link.title = "search by " + entry.path;
        if (entry.thumb) {
          var img = document.createElement("img"); img.src = entry.thumb; img.alt = entry.path; img.loading = "lazy";
          link.appendChild(img);
        } else {  // a URL item: never fetched, shown by its URL
          var tile = document.createElement("span"); tile.className = "url-tile"; tile.textContent = "URL only · not fetched";
          link.appendChild(tile);
        }
        li.appendChild(link);
        var name = document.createElement("div"); name.className = "path"; name.textContent = entry.path;
        li.appendChild(name); grid.appendChild(li);
      });
    });
  }
  document.getElementById("region-prev").addEventListener("click", function () { fetchRegion(regionPage - 1); });
  document.getElementById("region-next").addEventListener("click", function () { fetchRegion(regionPage + 1); });

  function position(event) {
    var box = canvas.getBoundingClientRect();
    return [(event.clientX - box.left) * canvas.width / box.width, (event.clientY - box.top) * canvas.height / box.height];
  }

  canvas.addEventListener("mousedown", function (event) {
    if (!data) { return; }
    var p = position(event);
    drag = { x0: p[0], y0: p[1], x1: p[0], y1: p[1], moved: false };
  });
  window.addEventListener("mouseup", function (event) {
    if (!drag || !data) { return; }
    var finished = drag;
    if (finished.moved) {
      showRegion(1);
      overlay();
    } else {
      var p = position(event), row = nearest(p[0], p[1]);
      drag = null;
      if (row >= 0) { item(row).then(function (entry) { window.location.href = entry.search; }); }
    }
  });
  canvas.addEventListener("mousemove", function (event) {
    if (!data) { return; }
    var p = position(event);
    if (drag) {
      drag.x1 = p[0]; drag.y1 = p[1];
      if (Math.abs(drag.x1 - drag.x0) + Math.abs(drag.y1 - drag.y0) > 6) { drag.moved = true; hover.hidden = true; }
      if (drag.moved) { overlay(); return; }
    }
    var row = nearest(p[0], p[1]);
    if (row === hovered) { return; }
    hovered = row;
    overlay();
    if (row < 0) { hover.hidden = true; return; }
    item(row).then(function (entry) {
      if (hovered !== row) { return; }
      if (entry.thumb) { hoverImage.src = entry.thumb; hoverImage.hidden = false; }
      else { hoverImage.removeAttribute("src"); hoverImage.hidden = true; }  // a URL item: not fetched
      hoverImage.alt = entry.path;
      hoverPath.textContent = entry.path;
      var box = canvas.getBoundingClientRect(), scale = box.width / canvas.width;
      var left = screen[2 * row] * scale + 14, top = screen[2 * row + 1] * scale + 14;
      if (left + 170 > box.width) { left = Math.max(0, left - 200); }
      if (top + 170 > box.height) { top = Math.max(0, top - 200); }
      hover.style.left = left + "px"; hover.style.top = top + "px";
      hover.hidden = false;
    }).catch(function () { hover.hidden = true; });
  });
  canvas.addEventListener("mouseleave", function () { hovered = -1; hover.hidden = true; if (data) { overlay(); } });

  colourChoice.addEventListener("change", function () {
    if (colourChoice.value === "duplicates" && !data.group) {
      status.textContent = "finding the duplicate groups…";
      load("/api/map/groups", function (body) {
        data.group = body.group; data.groups = body.groups;
        status.textContent = data.n + " images · " + data.method;
        colourBy("duplicates");
      });
    } else {
      colourBy(colourChoice.value);
    }
  });
  var resizing = null;
  window.addEventListener("resize", function () {
    clearTimeout(resizing);
    resizing = setTimeout(function () { if (data) { size(); layout(); colourBy(colourChoice.value); } }, 150);
  });

  size();
  load("/api/map", function (body) {
    data = body;
    status.textContent = data.n + " images · " + (data.method === "tsne" ? "t-SNE" : "PCA") +
      (data.placed ? " · " + data.placed + " placed from their neighbours" : "");
    canvas.dataset.points = String(data.n);
    size();
    layout();
    colourBy("label");
    // Where point ``row`` is drawn, in page coordinates (for automation and tests).
    canvas.galleriaPoint = function (row) {
      var box = canvas.getBoundingClientRect(), scale = box.width / canvas.width;
      return [box.left + screen[2 * row] * scale, box.top + screen[2 * row + 1] * scale];
    };
    canvas.dataset.ready = "1";
  });
})();
