// Draws the figure specs of benchmarks/figures.py as SVG, with hover tooltips and zoom.
// Self-contained (no library, no network). Inlined into report.html by benchmarks/html_report.py.
//
// Zoom: drag across a panel to zoom its x range (panels of a figure share it); double-click
// or "reset zoom" to go back. Hover: the nearest point (or the bar under the pointer) says its
// exact values. When every figure is drawn, <body data-rendered="N"> holds the number of
// figures drawn; each <figure> gets data-rendered="1" and data-marks (marks drawn).
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var M = {left: 150, right: 18, top: 26, bottom: 42};

  function el(name, attrs, parent) {
    var node = document.createElementNS(SVG, name);
    for (var key in attrs) { if (attrs[key] !== undefined && attrs[key] !== null) node.setAttribute(key, attrs[key]); }
    if (parent) parent.appendChild(node);
    return node;
  }

  function niceTicks(lo, hi, count) {
    if (!(hi > lo)) { hi = lo + 1; }
    var span = hi - lo, step = Math.pow(10, Math.floor(Math.log10(span / count)));
    var err = count / span * step;
    if (err <= 0.15) step *= 10; else if (err <= 0.35) step *= 5; else if (err <= 0.75) step *= 2;
    var ticks = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push(Math.abs(v) < step * 1e-9 ? 0 : v);
    return ticks;
  }

  function fmt(v) {
    var a = Math.abs(v);
    if (a >= 1e6) return (v / 1e6).toFixed(a >= 1e7 ? 0 : 1) + "M";
    if (a >= 1e4) return (v / 1e3).toFixed(0) + "k";
    if (a >= 100) return v.toFixed(0);
    if (a >= 1) return v.toFixed(a >= 10 ? 1 : 2).replace(/\.?0+$/, "");
    return v.toPrecision(2).replace(/\.?0+$/, "");
  }

  function extent(panel) {
    var xs = [], ys = [];
    (panel.series || []).forEach(function (s) { s.points.forEach(function (p) { xs.push(p[0]); ys.push(p[1]); }); });
    (panel.bars || []).forEach(function (b) { xs.push(b.x0, b.x1); });
    (panel.vlines || []).forEach(function (l) { xs.push(l.x); });
    var x0 = panel.x.min != null ? panel.x.min : Math.min.apply(null, xs.concat([0]));
    var x1 = panel.x.max != null ? panel.x.max : Math.max.apply(null, xs.concat([1]));
    var y0 = panel.y.min != null ? panel.y.min : Math.min.apply(null, ys.concat([0]));
    var y1 = panel.y.max != null ? panel.y.max : Math.max.apply(null, ys.concat([1]));
    if (!(x1 > x0)) x1 = x0 + 1;
    if (!(y1 > y0)) y1 = y0 + 1;
    return {x0: x0, x1: x1, y0: y0, y1: y1};
  }

  function marker(g, kind, x, y, color) {
    switch (kind) {
      case "cross":
        el("path", {d: "M" + (x - 4) + "," + (y - 4) + "L" + (x + 4) + "," + (y + 4) + "M" + (x - 4) + "," + (y + 4) + "L" + (x + 4) + "," + (y - 4), stroke: color, "stroke-width": 2}, g);
        break;
      case "tick":
        el("line", {x1: x, x2: x, y1: y - 8, y2: y + 8, stroke: color, "stroke-width": 2.5}, g);
        break;
      case "diamond":
        el("path", {d: "M" + x + "," + (y - 5) + "L" + (x + 5) + "," + y + "L" + x + "," + (y + 5) + "L" + (x - 5) + "," + y + "Z", fill: color}, g);
        break;
      case "ring":
        el("circle", {cx: x, cy: y, r: 4.5, fill: "none", stroke: color, "stroke-width": 1.5}, g);
        break;
      default:
        el("circle", {cx: x, cy: y, r: 2.8, fill: color}, g);
    }
  }

  function Tooltip() {
    var tip = document.createElement("div");
    tip.className = "tip";
    document.body.appendChild(tip);
    return {
      show: function (text, event) {
        tip.textContent = text;
        tip.style.display = "block";
        tip.style.left = (event.pageX + 12) + "px";
        tip.style.top = (event.pageY + 12) + "px";
      },
      hide: function () { tip.style.display = "none"; }
    };
  }

  function drawPanel(holder, figure, panel, index, zoom, tooltip, width, onZoom) {
    var rows = panel.rows;
    var plotH = rows ? Math.max(60, 26 * rows.length) : 260;
    var height = plotH + M.top + M.bottom;
    var svg = el("svg", {width: width, height: height, "class": "panel", "data-panel": index}, holder);
    var defs = el("defs", {}, svg);
    var hatches = {};
    function hatch(color) {
      var id = figure.id + "-hatch-" + index + "-" + Object.keys(hatches).length;
      if (!hatches[color]) {
        var pattern = el("pattern", {id: id, width: 6, height: 6, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)"}, defs);
        el("rect", {width: 6, height: 6, fill: "white"}, pattern);
        el("line", {x1: 0, y1: 0, x2: 0, y2: 6, stroke: color, "stroke-width": 3}, pattern);
        hatches[color] = "url(#" + id + ")";
      }
      return hatches[color];
    }
    var clip = el("clipPath", {id: figure.id + "-clip-" + index}, defs);
    var plotW = width - M.left - M.right;
    el("rect", {x: M.left, y: M.top, width: plotW, height: plotH}, clip);
    var ext = extent(panel);
    var x0 = zoom ? zoom[0] : ext.x0, x1 = zoom ? zoom[1] : ext.x1;
    var sx = function (v) { return M.left + (v - x0) / (x1 - x0) * plotW; };
    var sy = rows
      ? function (r) { return M.top + (r + 0.5) * plotH / rows.length; }
      : function (v) { return M.top + plotH - (v - ext.y0) / (ext.y1 - ext.y0) * plotH; };
    var marks = 0;
    if (panel.title) el("text", {x: M.left, y: 16, "class": "ptitle"}, svg).textContent = panel.title;
    var axes = el("g", {"class": "axes"}, svg);
    niceTicks(x0, x1, 8).forEach(function (t) {
      el("line", {x1: sx(t), x2: sx(t), y1: M.top, y2: M.top + plotH, "class": "grid"}, axes);
      el("text", {x: sx(t), y: M.top + plotH + 15, "text-anchor": "middle"}, axes).textContent = fmt(t);
    });
    if (rows) {
      rows.forEach(function (name, r) {
        el("line", {x1: M.left, x2: M.left + plotW, y1: sy(r), y2: sy(r), "class": "grid"}, axes);
        el("text", {x: M.left - 6, y: sy(r) + 4, "text-anchor": "end"}, axes).textContent = name;
      });
    } else {
      niceTicks(ext.y0, ext.y1, 5).forEach(function (t) {
        el("line", {x1: M.left, x2: M.left + plotW, y1: sy(t), y2: sy(t), "class": "grid"}, axes);
        el("text", {x: M.left - 6, y: sy(t) + 4, "text-anchor": "end"}, axes).textContent = fmt(t);
      });
      var yl = el("text", {x: 14, y: M.top + plotH / 2, "text-anchor": "middle", transform: "rotate(-90 14 " + (M.top + plotH / 2) + ")"}, axes);
      yl.textContent = panel.y.label || "";
    }
    el("rect", {x: M.left, y: M.top, width: plotW, height: plotH, "class": "frame"}, axes);
    el("text", {x: M.left + plotW / 2, y: height - 6, "text-anchor": "middle"}, axes).textContent = panel.x.label || "";

    var plot = el("g", {"clip-path": "url(#" + figure.id + "-clip-" + index + ")"}, svg);
    var hits = [], barHits = [];
    var band = rows ? plotH / rows.length : 0;
    (panel.bars || []).forEach(function (b) {
      if (!b.outline && !(b.x1 > b.x0)) return;
      var attrs = {x: sx(b.x0), y: sy(b.row) - band * (b.outline ? 0.42 : 0.3), width: Math.max(0.5, sx(b.x1) - sx(b.x0)), height: band * (b.outline ? 0.84 : 0.6)};
      if (b.outline) { attrs.fill = "none"; attrs.stroke = "#d62728"; attrs["stroke-width"] = 2.2; }
      else if (b.hatch) { attrs.fill = hatch(b.color); attrs.stroke = b.color; attrs["stroke-width"] = 0.8; }
      else { attrs.fill = b.color; }
      el("rect", attrs, plot).setAttribute("class", b.outline ? "bar outline" : "bar");
      if (!b.outline) barHits.push({x0: attrs.x, x1: attrs.x + attrs.width, y0: attrs.y, y1: attrs.y + attrs.height, tip: b.tip});
      marks++;
    });
    (panel.vlines || []).forEach(function (l) {
      el("line", {x1: sx(l.x), x2: sx(l.x), y1: M.top, y2: M.top + plotH, "class": "vline"}, plot);
      hits.push({x: sx(l.x), y: M.top + 8, tip: l.label});
    });
    (panel.series || []).forEach(function (s) {
      var pts = s.points;
      if (s.kind !== "points" && pts.length) {
        var d = "";
        pts.forEach(function (p, i) {
          var X = sx(p[0]), Y = sy(p[1]);
          if (i === 0) d += "M" + X + "," + Y;
          else if (s.kind === "step") d += "H" + X + "V" + Y;
          else d += "L" + X + "," + Y;
        });
        el("path", {d: d, fill: "none", stroke: s.color, "stroke-width": 1.8, "stroke-dasharray": s.dash ? "6,4" : null}, plot);
        marks++;
      }
      pts.forEach(function (p, i) {
        var X = sx(p[0]), Y = sy(p[1]);
        if (s.kind === "points" || s.marker) { marker(plot, s.marker, X, Y, s.color); marks++; }
        var tip = s.tips ? s.tips[i] : s.name + ": " + fmt(p[0]) + ", " + fmt(p[1]);
        hits.push({x: X, y: Y, tip: tip});
      });
    });

    // hover: the nearest point within 14 px; drag: zoom x; double-click: reset
    var overlay = el("rect", {x: M.left, y: M.top, width: plotW, height: plotH, "class": "overlay"}, svg);
    var brush = el("rect", {y: M.top, height: plotH, width: 0, "class": "brush"}, svg);
    var dragFrom = null;
    function localX(e) { var box = svg.getBoundingClientRect(); return e.clientX - box.left; }
    function localY(e) { var box = svg.getBoundingClientRect(); return e.clientY - box.top; }
    overlay.addEventListener("mousedown", function (e) { dragFrom = localX(e); brush.setAttribute("x", dragFrom); brush.setAttribute("width", 0); });
    overlay.addEventListener("mousemove", function (e) {
      var X = localX(e), Y = localY(e);
      if (dragFrom !== null) {
        brush.setAttribute("x", Math.min(dragFrom, X)); brush.setAttribute("width", Math.abs(X - dragFrom));
        return;
      }
      for (var i = 0; i < barHits.length; i++) {
        var bh = barHits[i];
        if (X >= bh.x0 - 1 && X <= bh.x1 + 1 && Y >= bh.y0 && Y <= bh.y1) { tooltip.show(bh.tip, e); return; }
      }
      var best = null, bestD = 14 * 14;
      hits.forEach(function (h) { var dd = (h.x - X) * (h.x - X) + (h.y - Y) * (h.y - Y); if (dd < bestD) { bestD = dd; best = h; } });
      if (best) tooltip.show(best.tip, e); else tooltip.hide();
    });
    overlay.addEventListener("mouseup", function (e) {
      var X = localX(e);
      if (dragFrom !== null && Math.abs(X - dragFrom) > 6) {
        var a = x0 + (Math.min(dragFrom, X) - M.left) / plotW * (x1 - x0);
        var b = x0 + (Math.max(dragFrom, X) - M.left) / plotW * (x1 - x0);
        onZoom([a, b]);
      }
      dragFrom = null; brush.setAttribute("width", 0);
    });
    overlay.addEventListener("mouseleave", function () { tooltip.hide(); dragFrom = null; brush.setAttribute("width", 0); });
    overlay.addEventListener("dblclick", function () { onZoom(null); });
    return marks;
  }

  function legend(figure) {
    var seen = {}, items = [];
    figure.panels.forEach(function (p) {
      (p.series || []).forEach(function (s) {
        if (!seen[s.name]) { seen[s.name] = 1; items.push({name: s.name, color: s.color, dash: s.dash, marker: s.marker, kind: s.kind}); }
      });
    });
    (figure.legend || []).forEach(function (e) { items.push(e); });
    var div = document.createElement("div");
    div.className = "legend";
    items.forEach(function (it) {
      var span = document.createElement("span");
      var sw = document.createElement("i");
      sw.className = "sw" + (it.hatch ? " hatch" : "") + (it.outline ? " outline" : "") + (it.dash ? " dash" : "");
      sw.style.setProperty("--c", it.color);
      span.appendChild(sw);
      span.appendChild(document.createTextNode(it.name));
      div.appendChild(span);
    });
    return div;
  }

  function drawFigure(node, figure, tooltip) {
    var zoom = null;
    var width = Math.max(640, Math.min(1100, node.clientWidth || 960));
    function render() {
      var holder = node.querySelector(".panels");
      holder.innerHTML = "";
      var marks = 0;
      figure.panels.forEach(function (panel, i) {
        marks += drawPanel(holder, figure, panel, i, zoom, tooltip, width, function (z) { zoom = z; render(); });
      });
      node.setAttribute("data-marks", marks);
      node.querySelector(".reset").style.visibility = zoom ? "visible" : "hidden";
      return marks;
    }
    node.querySelector(".reset").addEventListener("click", function () { zoom = null; render(); });
    node.insertBefore(legend(figure), node.querySelector(".panels"));
    var marks = render();
    if (marks > 0) node.setAttribute("data-rendered", "1");
    return marks > 0;
  }

  function main() {
    var figures = JSON.parse(document.getElementById("figures").textContent);
    var tooltip = Tooltip();
    var drawn = 0;
    figures.forEach(function (figure) {
      var node = document.getElementById("fig-" + figure.id);
      try {
        if (drawFigure(node, figure, tooltip)) drawn++;
      } catch (err) {
        node.setAttribute("data-error", String(err && err.stack || err));
        window.__chartErrors.push("figure " + figure.id + ": " + err);
        document.body.setAttribute("data-errors", window.__chartErrors.join(" | "));
      }
    });
    document.body.setAttribute("data-figures", figures.length);
    document.body.setAttribute("data-rendered", drawn);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", main); else main();
})();
