// gpuq charts: draws every element that carries an ECharts option in `data-chart-option` (the
// server builds the options; see src/server/usage/charts.rs). The elements are watched, so charts
// appear and change with the page, whether it was rendered on the server or updated in the
// browser. ECharts itself (public/vendor/, Apache-2.0) is loaded on first use, from this server.
(function () {
  "use strict";
  if (window.gpuqChart) {
    window.gpuqChart.scan();
    return;
  }
  var ECHARTS = "/vendor/echarts.common.min.js";
  var drawn = new Set();
  var loading = null;

  function withEcharts(then) {
    if (window.echarts) return then();
    if (!loading) {
      loading = new Promise(function (resolve, reject) {
        var s = document.createElement("script");
        s.src = ECHARTS;
        s.onload = resolve;
        s.onerror = function () {
          loading = null;
          reject(new Error("could not load " + ECHARTS));
        };
        document.head.appendChild(s);
      });
    }
    loading.then(then, function (e) {
      console.error("gpuq charts:", e.message);
    });
  }

  // Draws (or redraws) one chart; `option` is the JSON text or an object.
  function gpuqChart(el, option) {
    withEcharts(function () {
      var parsed = typeof option === "string" ? JSON.parse(option) : option;
      var chart = window.echarts.getInstanceByDom(el) || window.echarts.init(el);
      chart.setOption(parsed, true);
      el.setAttribute("data-chart-drawn", "true");
      drawn.add(el);
    });
  }

  function scan() {
    drawn.forEach(function (el) {
      if (!el.isConnected) {
        var chart = window.echarts && window.echarts.getInstanceByDom(el);
        if (chart) chart.dispose();
        drawn.delete(el);
      }
    });
    document.querySelectorAll("[data-chart-option]").forEach(function (el) {
      var text = el.getAttribute("data-chart-option");
      if (el.__gpuqOption === text) return;
      el.__gpuqOption = text;
      try {
        gpuqChart(el, text);
      } catch (e) {
        console.error("gpuq charts: bad option", e);
      }
    });
  }

  var pending = false;
  function soon() {
    if (pending) return;
    pending = true;
    window.requestAnimationFrame(function () {
      pending = false;
      scan();
    });
  }

  gpuqChart.scan = scan;
  window.gpuqChart = gpuqChart;

  function start() {
    new MutationObserver(soon).observe(document.body, {
      childList: true,
      subtree: true,
      attributes: true,
      attributeFilter: ["data-chart-option"],
    });
    window.addEventListener("resize", function () {
      drawn.forEach(function (el) {
        var chart = window.echarts && window.echarts.getInstanceByDom(el);
        if (chart) chart.resize();
      });
    });
    scan();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
