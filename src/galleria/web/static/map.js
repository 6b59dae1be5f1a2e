// The gallery's map: every image a point on a canvas (plain 2-D canvas, no library, no CDN).
// The server sends at most a level of points at once (all of a small map; a seeded sample of a large
// one) and, when the view is zoomed, the points inside it (again at most that many: zooming in shows
// more of them, down to every one). Points are drawn into one ImageData buffer; a grid of cells finds
// the point under the cursor; hovering shows its thumbnail, a click opens it with its neighbours, the
// wheel (or the buttons) zooms, a shift-drag pans, and a dragged rectangle lists the images inside it
// below the map (asked of the server), and links to the browse grid filtered by it (/?map=x0,y0,x1,y1).
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
  // shown: the points drawn now ({rows, label, xy, count}); view: the map rectangle on the canvas.
  var shown = null, view = null, extent = null, asked = 0, fetching = null, groupOf = null;

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
    if (extent) { aspect = Math.max(1, extent[3] - extent[1]) / Math.max(1, extent[2] - extent[0]); }
    var height = Math.max(240, Math.min(Math.floor(width * aspect) + 2 * MARGIN, Math.floor(window.innerHeight * 0.75)));
    canvas.width = width; canvas.height = height;
  }

  function bounds(xy, count) {
    var minX = SCALE, maxX = 0, minY = SCALE, maxY = 0;
    for (var p = 0; p < count; p++) {
      minX = Math.min(minX, xy[2 * p]); maxX = Math.max(maxX, xy[2 * p]);
      minY = Math.min(minY, xy[2 * p + 1]); maxY = Math.max(maxY, xy[2 * p + 1]);
    }
    if (count === 0) { minX = maxX = minY = maxY = 0; }
    return [minX, minY, maxX, maxY];
  }

  function layout() {
    var n = shown.count, xy = shown.xy;
    var w = canvas.width - 2 * MARGIN, h = canvas.height - 2 * MARGIN;
    var minX = view[0], minY = view[1], maxX = view[2], maxY = view[3];
    // One scale for both axes (the map keeps its shape), the view's extent centred.
    var s = Math.min(w / Math.max(1, maxX - minX), h / Math.max(1, maxY - minY));
    var ox = MARGIN + (w - s * (maxX - minX)) / 2 - s * minX, oy = MARGIN + (h - s * (maxY - minY)) / 2 - s * minY;
    screen = new Float32Array(2 * n);
    var columns = Math.ceil(canvas.width / CELL), rows = Math.ceil(canvas.height / CELL);
    var outside = columns * rows;  // one extra cell holds the points off the canvas
    var counts = new Int32Array(outside + 2);
    var cellOf = new Int32Array(n);
    for (var i = 0; i < n; i++) {
      var x = ox + xy[2 * i] * s, y = oy + xy[2 * i + 1] * s;
      screen[2 * i] = x; screen[2 * i + 1] = y;
      var cx = Math.floor(x / CELL), cy = Math.floor(y / CELL);
      var cell = (cx >= 0 && cx < columns && cy >= 0 && cy < rows) ? cy * columns + cx : outside;
      cellOf[i] = cell;
      counts[cell + 1]++;
    }
    for (var c = 1; c < counts.length; c++) { counts[c] += counts[c - 1]; }
    var order = new Int32Array(n), fill = counts.slice();
    for (var j = 0; j < n; j++) { order[fill[cellOf[j]]++] = j; }
    cells = { columns: columns, rows: rows, start: counts, order: order };
    data.view = { s: s, ox: ox, oy: oy };
  }

  function draw() {
    var width = canvas.width, height = canvas.height;
    var count = shown.count;
    if (count <= 5000) {
      // Few points: round dots drawn by the canvas, biggest for the smallest maps.
      var radius = count > 1000 ? 2.5 : 4;
      context.fillStyle = "#fff";
      context.fillRect(0, 0, width, height);
      for (var k = 0; k < count; k++) {
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
    var half = count > 20000 ? 1 : 2;
    for (var i = 0; i < count; i++) {
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
    if (hovered >= 0 && hovered < shown.count) {
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
    var n = shown.count;
    colours = new Uint32Array(n);
    legend.textContent = "";
    if (kind === "duplicates" && groupOf) {
      var grey = rgb(0, 0, 82);
      for (var i = 0; i < n; i++) {
        var group = groupOf.get(shown.rows[i]);
        colours[i] = group === undefined ? grey : rgb(hue(group), 75, 42);
      }
      addLegend(rgb(0, 0, 82), "not a duplicate");
      addLegend(rgb(hue(0), 75, 42), data.groups + " duplicate groups (one colour each)");
    } else {
      for (var j = 0; j < n; j++) { colours[j] = rgb(hue(shown.label[j]), 65, 45); }
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
    drag = { x0: p[0], y0: p[1], x1: p[0], y1: p[1], moved: false, pan: event.shiftKey, view: view.slice() };
  });
  window.addEventListener("mouseup", function (event) {
    if (!drag || !data) { return; }
    var finished = drag;
    if (finished.pan) {
      drag = null;
      if (finished.moved) { refine(); }
    } else if (finished.moved) {
      showRegion(1);
      overlay();
    } else {
      var p = position(event), index = nearest(p[0], p[1]);
      drag = null;
      if (index >= 0) { item(shown.rows[index]).then(function (entry) { window.location.href = entry.search; }); }
    }
  });
  canvas.addEventListener("mousemove", function (event) {
    if (!data) { return; }
    var p = position(event);
    if (drag) {
      drag.x1 = p[0]; drag.y1 = p[1];
      if (Math.abs(drag.x1 - drag.x0) + Math.abs(drag.y1 - drag.y0) > 6) { drag.moved = true; hover.hidden = true; }
      if (drag.moved && drag.pan) {  // shift-drag: move the view with the pointer
        var s = data.view.s, dx = (drag.x1 - drag.x0) / s, dy = (drag.y1 - drag.y0) / s;
        view = [drag.view[0] - dx, drag.view[1] - dy, drag.view[2] - dx, drag.view[3] - dy];
        layout(); draw();
        return;
      }
      if (drag.moved) { overlay(); return; }
    }
    var index = nearest(p[0], p[1]);
    if (index === hovered) { return; }
    hovered = index;
    overlay();
    if (index < 0) { hover.hidden = true; return; }
    var row = shown.rows[index], points = shown;
    item(row).then(function (entry) {
      if (hovered !== index || shown !== points) { return; }
      if (entry.thumb) { hoverImage.src = entry.thumb; hoverImage.hidden = false; }
      else { hoverImage.removeAttribute("src"); hoverImage.hidden = true; }  // a URL item: not fetched
      hoverImage.alt = entry.path;
      hoverPath.textContent = entry.path;
      var box = canvas.getBoundingClientRect(), scale = box.width / canvas.width;
      var left = screen[2 * index] * scale + 14, top = screen[2 * index + 1] * scale + 14;
      if (left + 170 > box.width) { left = Math.max(0, left - 200); }
      if (top + 170 > box.height) { top = Math.max(0, top - 200); }
      hover.style.left = left + "px"; hover.style.top = top + "px";
      hover.hidden = false;
    }).catch(function () { hover.hidden = true; });
  });
  canvas.addEventListener("mouseleave", function () { hovered = -1; hover.hidden = true; if (data) { overlay(); } });

  // Zooming: the view shrinks or grows around a point; the points inside it are asked of the
  // server when the map holds more than one answer sends (dataset.asked / dataset.drawn count the
  // views asked for and drawn, for automation).
  function zoom(factor, x, y) {
    if (!data) { return; }
    var at = toMap(x, y), full = Math.max(extent[2] - extent[0], extent[3] - extent[1], 1);
    var span = Math.max(view[2] - view[0], view[3] - view[1], 1);
    var wanted = Math.min(full * 1.05, Math.max(16, span * factor));
    var k = wanted / span;
    view = [at[0] - (at[0] - view[0]) * k, at[1] - (at[1] - view[1]) * k,
            at[0] + (view[2] - at[0]) * k, at[1] + (view[3] - at[1]) * k];
    hovered = -1; hover.hidden = true;
    layout(); draw();
    refine();
  }
  var waiting = null;
  function refine() {
    asked += 1;
    canvas.dataset.asked = String(asked);
    var number = asked;
    clearTimeout(waiting);
    if (data.shown >= data.n) { canvas.dataset.drawn = String(number); return; }
    waiting = setTimeout(function () {
      var clamp = function (v) { return Math.min(SCALE, Math.max(0, Math.round(v))); };
      var query = "x0=" + clamp(view[0]) + "&y0=" + clamp(view[1]) + "&x1=" + clamp(view[2]) + "&y1=" + clamp(view[3]);
      if (fetching) { fetching.abort(); }
      fetching = new AbortController();
      fetch("/api/map/view?" + query, { signal: fetching.signal }).then(function (answer) {
        if (!answer.ok) { throw new Error("view " + answer.status); }
        return answer.json();
      }).then(function (body) {
        if (number !== asked) { return; }
        use(body);
        canvas.dataset.drawn = String(number);
      }).catch(function (error) { if (error.name !== "AbortError") { status.textContent = "the map's points could not be loaded"; } });
    }, 120);
  }
  function use(body) {
    // A new set of points to draw: ``body`` is /api/map's or /api/map/view's answer.
    shown = { rows: body.rows, label: body.label, xy: body.xy, count: body.rows.length };
    canvas.dataset.shown = String(shown.count);
    hovered = -1;
    layout();
    colourBy(colourChoice.value);
    var total = body.total === undefined ? data.n : body.total;
    note.textContent = total > shown.count
      ? "showing " + shown.count.toLocaleString() + " of the " + total.toLocaleString() + " images in view (zoom in for more)"
      : (data.n > data.shown ? "every image in view is shown" : "");
  }
  canvas.addEventListener("wheel", function (event) {
    if (!data) { return; }
    event.preventDefault();
    var p = position(event);
    zoom(event.deltaY < 0 ? 0.6 : 1 / 0.6, p[0], p[1]);
  }, { passive: false });
  document.getElementById("zoom-in").addEventListener("click", function () { zoom(0.5, canvas.width / 2, canvas.height / 2); });
  document.getElementById("zoom-out").addEventListener("click", function () { zoom(2, canvas.width / 2, canvas.height / 2); });
  document.getElementById("zoom-reset").addEventListener("click", function () {
    if (!data) { return; }
    view = extent.slice(); layout(); draw(); refine();
  });

  colourChoice.addEventListener("change", function () {
    if (colourChoice.value === "duplicates" && !groupOf) {
      status.textContent = "finding the duplicate groups…";
      load("/api/map/groups", function (body) {
        groupOf = new Map();
        for (var i = 0; i < body.rows.length; i++) { groupOf.set(body.rows[i], body.group[i]); }
        data.groups = body.groups;
        status.textContent = describe();
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

  function describe() {
    var text = data.n.toLocaleString() + " images · " + (data.method === "tsne" ? "t-SNE" : "PCA");
    if (data.sampled) { text += " of a sample of " + data.sampled.toLocaleString() + ", the others placed from their neighbours"; }
    if (data.placed) { text += " · " + data.placed.toLocaleString() + " placed from their neighbours"; }
    return text;
  }

  var note = document.getElementById("map-level");
  size();
  load("/api/map", function (body) {
    data = body;
    extent = bounds(body.xy, body.rows.length);
    view = extent.slice();
    status.textContent = describe();
    canvas.dataset.points = String(data.n);
    size();
    use(body);
    // Where the point of store row ``row`` is drawn, in page coordinates (null when it is not drawn
    // now: a large map draws a sample until zoomed in); for automation and tests.
    canvas.galleriaPoint = function (row) {
      var low = 0, high = shown.count - 1;
      while (low <= high) {
        var middle = (low + high) >> 1;
        if (shown.rows[middle] === row) {
          var box = canvas.getBoundingClientRect(), scale = box.width / canvas.width;
          return [box.left + screen[2 * middle] * scale, box.top + screen[2 * middle + 1] * scale];
        }
        if (shown.rows[middle] < row) { low = middle + 1; } else { high = middle - 1; }
      }
      return null;
    };
    canvas.dataset.asked = "0"; canvas.dataset.drawn = "0";
    canvas.dataset.ready = "1";
  });
})();
