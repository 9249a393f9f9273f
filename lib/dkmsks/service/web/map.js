/* The live map of dkm serve (dkmsks.service.livemap; docs/design.md §10, "The live map").
 *
 * Draws the space the engine measures distances in (Euclidean on x, y) with Leaflet's
 * CRS.Simple, lat = y and lng = x, so a kNN ball is a circle on the screen. State comes from
 * GET v1/snapshot (subscriptions with place, k, keywords, worker and exact kNN at a timestamp)
 * and GET v1/objects; live changes from GET v1/events, read with fetch() so that the token goes
 * in the Authorization header (EventSource cannot send one) and resumed from the last event id.
 * Every change of a commit is applied when its closing `processed` event arrives, in order,
 * one commit at a time (a queue), so the map only ever shows whole timestamps.
 *
 * window.dkmMap exposes the state for tests and the console: dkmMap.summary().
 */
(function () {
  "use strict";

  const TOKEN_KEY = "dkmsks.map.token";
  const RECENT = 5;        // timestamps of objects shown besides the results' objects
  const LIMIT = 2000;      // subscriptions a snapshot brings at most
  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#393b79", "#ad494a", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd",
    "#e6550d", "#31a354", "#756bb1"];

  const $ = (id) => document.getElementById(id);
  // Ids are int64: JSON.parse would round those beyond 2**53, so such a number is read from its
  // source text, as a string, and every id is a key by its decimal string (String(id)).
  const parse = (text) => JSON.parse(text, (key, value, context) =>
    (typeof value === "number" && !Number.isSafeInteger(value) && context && /^-?\d+$/.test(context.source)
      ? context.source : value));
  const key = (id) => String(id);
  const state = {
    token: null, t: null, last: null, horizon: null, crs: null, space: null, live: true,
    subs: new Map(),      // key(id) -> subscription (snapshot fields) and its layers
    objects: new Map(),   // key(id) -> {id, x, y, keywords, t}
    pending: [],          // change events of the commit being received
    lastId: null, connected: false, total: 0, truncated: false, selected: null,
    events: 0, commits: 0, errors: [],
  };
  let map = null, subLayer = null, objectLayer = null, outlineLayer = null, canvas = null, markers = null;
  let queue = Promise.resolve(), stream = null, fitted = false;

  const colour = (w) => (w >= 0 && w < PALETTE.length ? PALETTE[w] : `hsl(${(w * 137.508) % 360}, 60%, 45%)`);
  const fmt = (v) => (Math.abs(v) >= 1000 || v === 0 ? v.toFixed(1) : v.toPrecision(5));
  const latlng = (x, y) => L.latLng(y, x);

  // ------------------------------------------------------------------ the API
  class Unauthorized extends Error {}

  async function api(path, params) {
    const query = new URLSearchParams();
    for (const [key, value] of Object.entries(params || {})) {
      if (value === undefined || value === null) continue;
      for (const v of Array.isArray(value) ? value : [value]) query.append(key, String(v));
    }
    const url = path + (query.toString() ? "?" + query : "");
    const res = await fetch(url, { headers: { Authorization: "Bearer " + state.token }, cache: "no-store" });
    if (res.status === 401 || res.status === 403) throw new Unauthorized(parse(await res.text()).detail);
    if (!res.ok) throw new Error(`${path}: ${res.status} ${(await res.text()).slice(0, 300)}`);
    return parse(await res.text());
  }

  function enqueue(task) {
    queue = queue.then(task).catch((err) => fail(err));
    return queue;
  }

  function fail(err) {
    if (err instanceof Unauthorized) { logout(err.message); return; }
    state.errors.push(String(err));
    console.error(err);
    setStatus();
  }

  // ------------------------------------------------------------------ drawing
  function setup() {
    map = L.map("map", { crs: L.CRS.Simple, minZoom: -24, maxZoom: 24, zoomSnap: 0.25, zoomDelta: 0.5,
      attributionControl: true });
    // Panes, bottom to top: outlines, balls and lines (overlayPane, 400), objects, subscriptions.
    map.createPane("objects").style.zIndex = "450";
    map.createPane("subs").style.zIndex = "500";
    canvas = L.canvas({ padding: 0.3, pane: "objects" });
    markers = L.svg({ pane: "subs" });
    outlineLayer = L.layerGroup().addTo(map);
    objectLayer = L.layerGroup().addTo(map);
    subLayer = L.layerGroup().addTo(map);
    map.on("moveend", () => { if (state.truncated) enqueue(() => reloadView()); });
    map.on("click", () => select(null));
  }

  async function drawOutlines() {
    outlineLayer.clearLayers();
    $("map").classList.toggle("projected", state.crs !== "wgs84");
    $("outlines-toggle").hidden = state.crs !== "wgs84";  // plane coordinates have no basemap
    if (state.crs !== "wgs84" || !$("outlines").checked) return;
    const style = { color: "#8a99a8", weight: 0.8, fill: true, fillColor: "#f6f4ee", fillOpacity: 1,
      interactive: false };
    const [world, us] = await Promise.all([
      fetch("static/world-atlas/countries-50m.json").then((r) => r.json()),
      fetch("static/us-atlas/states-10m.json").then((r) => r.json())]);
    L.geoJSON(topojson.feature(world, world.objects.countries), { style }).addTo(outlineLayer);
    L.geoJSON(topojson.mesh(us, us.objects.states, (a, b) => a !== b),
      { style: { color: "#b0b8c0", weight: 0.6, interactive: false } }).addTo(outlineLayer);
    map.attributionControl.addAttribution("outlines: Natural Earth (world-atlas), US Census Bureau (us-atlas)");
  }

  function drawSub(sub) {
    if (sub.layers) sub.layers.forEach((layer) => subLayer.removeLayer(layer));
    const c = colour(sub.worker), here = latlng(sub.x, sub.y), layers = [], chosen = state.selected === key(sub.id);
    const ends = sub.object_ids.map((o) => state.objects.get(key(o))).filter(Boolean);
    if (ends.length) {
      layers.push(L.polyline(ends.map((o) => [here, latlng(o.x, o.y)]),
        { color: c, weight: chosen ? 2.5 : 1, opacity: chosen ? 1 : 0.7, interactive: false, className: "dkm-line" }));
    }
    if (sub.object_ids.length >= sub.k && sub.k > 0) {  // a full result: the ball of radius the k-th distance
      layers.push(L.circle(here, { radius: sub.distances[sub.k - 1], color: c, weight: chosen ? 2.5 : 1,
        opacity: chosen ? 1 : 0.6, fillOpacity: chosen ? 0.16 : 0.05, interactive: false, className: "dkm-ball" }));
    }
    const marker = L.circleMarker(here, { radius: chosen ? 8 : 6, color: c, weight: 2, fillColor: "#fff",
      fillOpacity: 1, renderer: markers, className: `dkm-sub dkm-sub-${sub.id}` + (chosen ? " selected" : "") });
    marker.bindTooltip(`sub ${sub.id} · worker ${sub.worker} · k ${sub.k} · ${sub.keywords.join(" ")}`);
    marker.on("click", (e) => { L.DomEvent.stopPropagation(e); select(key(sub.id)); });
    layers.push(marker);
    layers.forEach((layer) => layer.addTo(subLayer));
    sub.layers = layers;
  }

  function removeSub(id) {
    const sub = state.subs.get(key(id));
    if (!sub) return;
    (sub.layers || []).forEach((layer) => subLayer.removeLayer(layer));
    state.subs.delete(key(id));
    if (state.selected === key(id)) select(null);
  }

  function drawObjects() {
    objectLayer.clearLayers();
    const used = usedObjects();
    for (const o of state.objects.values()) {
      const recent = state.t !== null && o.t > state.t - RECENT;
      const result = used.has(key(o.id));
      if (!recent && !result) continue;
      const age = state.t === null ? 0 : Math.max(0, state.t - o.t);
      L.circleMarker(latlng(o.x, o.y), { renderer: canvas, radius: result ? 3.5 : 2.5,
        color: "#fff", weight: result ? 1 : 0, fillColor: result ? "#111" : "#8b1e3f",
        fillOpacity: recent ? 0.9 - 0.12 * age : 0.6, interactive: false }).addTo(objectLayer);
    }
  }

  function usedObjects() {
    const used = new Set();
    for (const sub of state.subs.values()) sub.object_ids.forEach((o) => used.add(key(o)));
    return used;
  }

  function forgetOldObjects() {
    const used = usedObjects();
    for (const [id, o] of state.objects) {
      if (o.t <= state.t - RECENT && !used.has(id)) state.objects.delete(id);
    }
  }

  function drawLegend() {
    const counts = new Map();
    for (const sub of state.subs.values()) counts.set(sub.worker, (counts.get(sub.worker) || 0) + 1);
    const ul = $("legend");
    ul.replaceChildren(...[...counts.keys()].sort((a, b) => a - b).map((w) => {
      const li = document.createElement("li");
      const dot = document.createElement("span");
      dot.className = "swatch";
      dot.style.background = colour(w);
      li.append(dot, `worker ${w}: ${counts.get(w)}`);
      li.dataset.worker = String(w);
      return li;
    }));
  }

  function setStatus() {
    const shown = state.subs.size, of = state.truncated ? ` of ${state.total}` : "";
    const mode = state.live ? (state.connected ? "live" : "reconnecting") : "as of";
    const error = state.errors.length ? ` · ${state.errors[state.errors.length - 1]}` : "";
    $("status").textContent = `t=${state.t ?? "–"} · ${mode} · ${shown}${of} subscriptions · ` +
      `${state.objects.size} objects${error}`;
    $("t-label").textContent = state.t ?? "–";
    $("live").classList.toggle("on", state.live);
    document.body.dataset.t = state.t ?? "";
    document.body.dataset.live = String(state.live && state.connected);
    const slider = $("slider");
    slider.min = String(state.horizon ?? Math.min(state.t ?? 0, state.last ?? 0));
    slider.max = String(state.last ?? state.t ?? 0);
    if (state.t !== null && document.activeElement !== slider) slider.value = String(state.t);
  }

  function select(id) {
    const before = state.selected !== null && state.subs.get(state.selected);
    state.selected = id === null ? null : key(id);
    if (before) drawSub(before);
    const sub = state.selected !== null && state.subs.get(state.selected);
    if (!sub) {
      $("details").innerHTML = '<p class="hint">Click a subscription (a ringed dot) for its results.</p>';
      return;
    }
    drawSub(sub);
    showDetails(sub);
    const missing = sub.object_ids.filter((o) => !state.objects.get(key(o))?.keywords);
    if (missing.length) {
      const wanted = state.selected;
      enqueue(async () => {
        const found = await api("v1/objects", { ids: missing, until: state.t });
        found.objects.forEach((o) => state.objects.set(key(o.id), o));
        if (state.selected === wanted && state.subs.get(wanted)) showDetails(state.subs.get(wanted));
      });
    }
  }

  function showDetails(sub) {
    const box = $("details");
    box.replaceChildren();
    box.dataset.sub = String(sub.id);
    const dl = document.createElement("dl");
    const facts = [["id", sub.id], ["worker", sub.worker], ["k", sub.k], ["keywords", sub.keywords.join(" ")],
      ["place", `${fmt(sub.x)}, ${fmt(sub.y)}`], ["registered at", `t=${sub.registered_t}`],
      ["results at", `t=${state.t}`]];
    if (sub.owner !== undefined && sub.owner !== null) facts.push(["owner", sub.owner]);
    if (sub.object_ids.length >= sub.k) facts.push(["ball radius", fmt(sub.distances[sub.k - 1])]);
    for (const [name, value] of facts) {
      const dt = document.createElement("dt"), dd = document.createElement("dd");
      dt.textContent = name;
      dd.textContent = String(value);
      dl.append(dt, dd);
    }
    const zoom = document.createElement("button");
    zoom.type = "button";
    zoom.id = "zoom-to";
    zoom.textContent = "Zoom to its kNN";
    zoom.addEventListener("click", () => zoomTo(sub));
    const table = document.createElement("table");
    table.id = "results";
    table.innerHTML = "<thead><tr><th>#</th><th>object</th><th>distance</th><th>t</th><th>keywords</th></tr></thead>";
    const body = document.createElement("tbody");
    sub.object_ids.forEach((o, i) => {
      const tr = document.createElement("tr"), obj = state.objects.get(key(o));
      tr.dataset.object = String(o);
      for (const [text, cls] of [[i + 1, "num"], [o, "num"], [fmt(sub.distances[i]), "num"],
        [obj ? obj.t : "", "num"], [obj?.keywords ? obj.keywords.join(" ") : "…", ""]]) {
        const td = document.createElement("td");
        td.textContent = String(text);
        if (cls) td.className = cls;
        tr.append(td);
      }
      body.append(tr);
    });
    table.append(body);
    box.append(dl, zoom, sub.object_ids.length ? table : Object.assign(document.createElement("p"),
      { className: "hint", textContent: "no object matches its keywords yet" }));
  }

  function zoomTo(sub) {
    const points = [latlng(sub.x, sub.y)].concat(sub.object_ids.map((o) => state.objects.get(key(o)))
      .filter(Boolean).map((o) => latlng(o.x, o.y)));
    let bounds = L.latLngBounds(points);
    if (sub.object_ids.length >= sub.k && sub.k > 0) {
      const r = sub.distances[sub.k - 1];
      bounds = bounds.extend(latlng(sub.x - r, sub.y - r)).extend(latlng(sub.x + r, sub.y + r));
    }
    map.fitBounds(bounds.pad(0.3), { maxZoom: map.getZoom() + 5 });
  }

  // ------------------------------------------------------------------ loading
  function addObjects(list) {
    for (const o of list) {
      const known = state.objects.get(key(o.id));
      state.objects.set(key(o.id), known && known.keywords && !o.keywords ? known : o);
    }
  }

  function takeSnapshot(snap, replace) {
    if (replace) {
      for (const id of [...state.subs.keys()]) removeSub(id);
    }
    state.t = snap.t;
    state.last = Math.max(state.last ?? snap.last_processed, snap.last_processed);
    state.horizon = snap.horizon;
    state.space = snap.space;
    if (replace) {
      state.total = snap.total;
      state.truncated = snap.truncated;
    }
    addObjects(snap.objects);
    for (const s of snap.subscriptions) {
      removeSub(s.id);
      state.subs.set(key(s.id), s);
    }
  }

  function viewBox() {
    const b = map.getBounds();
    return [b.getWest(), b.getSouth(), b.getEast(), b.getNorth()].join(",");
  }

  async function load(asOf) {
    const first = state.crs === null;
    const snap = await api("v1/snapshot", { as_of: asOf, limit: LIMIT });
    if (first) {
      state.crs = snap.crs;
      await drawOutlines();
    }
    takeSnapshot(snap, true);
    const recent = await api("v1/objects", { since: snap.t - RECENT, until: snap.t });
    addObjects(recent.objects);
    forgetOldObjects();
    if (!fitted) {
      fit();
      fitted = true;
    }
    redraw();
  }

  async function reloadView() {
    if (state.t === null) return;
    const snap = await api("v1/snapshot", { as_of: state.t, limit: LIMIT, box: viewBox() });
    takeSnapshot(snap, true);
    redraw();
  }

  function fit() {
    const points = [...state.subs.values()].map((s) => latlng(s.x, s.y))
      .concat([...state.objects.values()].map((o) => latlng(o.x, o.y)));
    if (points.length) {
      map.fitBounds(L.latLngBounds(points), { padding: [30, 30] });
    } else if (state.space) {
      const [x0, y0, x1, y1] = state.space;
      map.fitBounds(L.latLngBounds(latlng(x0, y0), latlng(x1, y1)));
    }
  }

  function redraw() {
    for (const sub of state.subs.values()) drawSub(sub);
    drawObjects();
    drawLegend();
    if (state.selected !== null) {
      const sub = state.subs.get(state.selected);
      if (sub) showDetails(sub); else select(null);
    }
    setStatus();
  }

  // ------------------------------------------------------------------ the event stream
  function follow(after) {
    stop();
    state.live = true;
    state.lastId = String(after);
    const controller = new AbortController();
    stream = controller;
    (async () => {
      while (stream === controller) {
        try {
          const res = await fetch("v1/events", { signal: controller.signal, cache: "no-store",
            headers: { Authorization: "Bearer " + state.token, Accept: "text/event-stream",
              "Last-Event-ID": state.lastId } });
          if (res.status === 401 || res.status === 403) throw new Unauthorized(parse(await res.text()).detail);
          if (!res.ok) throw new Error(`events: ${res.status}`);
          state.connected = true;
          setStatus();
          await read(res.body, controller);
        } catch (err) {
          if (err instanceof Unauthorized) { logout(err.message); return; }
          if (controller.signal.aborted) return;
          state.errors.push(String(err));
        }
        state.connected = false;
        setStatus();
        await new Promise((r) => setTimeout(r, 2000));
      }
    })();
  }

  function stop() {
    if (stream) stream.abort();
    stream = null;
    state.connected = false;
    state.pending = [];
  }

  async function read(body, controller) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    while (stream === controller) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const event = { id: null, event: "message", data: "" };
        for (const line of block.split("\n")) {
          if (!line || line.startsWith(":")) continue;
          const at = line.indexOf(":");
          const name = at < 0 ? line : line.slice(0, at);
          const text = at < 0 ? "" : line.slice(at + 1).replace(/^ /, "");
          if (name === "data") event.data += text; else if (name in event) event[name] = text;
        }
        if (event.data) handle(event, parse(event.data));
      }
    }
  }

  function handle(event, data) {
    state.events += 1;
    if (event.id !== null) state.lastId = event.id;
    if (event.event === "change") {
      state.pending.push(data);
    } else if (event.event === "processed") {
      const changes = state.pending;
      state.pending = [];
      enqueue(() => commit(data.t, changes));
    } else if (event.event === "reset") {
      state.pending = [];
      enqueue(() => load(data.t));
    }
  }

  async function commit(t, changes) {
    if (!state.live) return;
    const from = state.t;
    const fresh = [];
    for (const c of changes) {
      const sub = state.subs.get(key(c.sub_id));
      if (c.change === "delete") {
        removeSub(c.sub_id);
      } else if (sub && c.change === "update") {
        sub.object_ids = c.object_ids;
        sub.distances = c.distances;
      } else if (c.change === "insert" && state.subs.size + fresh.length < LIMIT) {
        removeSub(c.sub_id);
        fresh.push(c.sub_id);
      }
    }
    state.t = t;
    state.last = Math.max(state.last ?? t, t);
    state.commits += 1;
    const recent = await api("v1/objects", { since: from === null ? t - RECENT : from, until: t });
    addObjects(recent.objects);
    if (fresh.length) {
      const snap = await api("v1/snapshot", { as_of: t, sub: fresh, limit: fresh.length });
      takeSnapshot(snap, false);
    }
    const missing = [...usedObjects()].filter((o) => !state.objects.has(o));  // keys: decimal strings
    if (missing.length) addObjects((await api("v1/objects", { ids: missing, until: t })).objects);
    forgetOldObjects();
    redraw();
  }

  // ------------------------------------------------------------------ time travel
  function goTo(t) {
    stop();
    state.live = false;
    enqueue(() => load(t));
  }

  function goLive() {
    stop();
    enqueue(async () => {
      await load(undefined);
      follow(state.t);
    });
  }

  // ------------------------------------------------------------------ who is looking
  function logout(message) {
    stop();
    sessionStorage.removeItem(TOKEN_KEY);
    state.token = null;
    $("app").hidden = true;
    $("login").hidden = false;
    $("login-error").textContent = message || "";
    $("token").value = "";
  }

  async function start(token) {
    state.token = token;
    try {
      await api("v1/status");
    } catch (err) {
      logout(err instanceof Unauthorized ? "this token is not valid here: " + err.message : String(err));
      return;
    }
    sessionStorage.setItem(TOKEN_KEY, token);
    $("login").hidden = true;
    $("app").hidden = false;
    if (!map) setup();
    map.invalidateSize();
    goLive();
  }

  function summary() {
    const subs = {};
    for (const [id, s] of state.subs) {
      subs[id] = { worker: s.worker, k: s.k, object_ids: s.object_ids.slice(), distances: s.distances.slice(),
        x: s.x, y: s.y };
    }
    return { t: state.t, live: state.live, connected: state.connected, crs: state.crs, total: state.total,
      outlines: outlineLayer ? outlineLayer.getLayers().length : 0, objects: state.objects.size,
      commits: state.commits, errors: state.errors.slice(), subscriptions: subs };
  }

  window.dkmMap = { state, summary, goTo, goLive, select, map: () => map };

  document.addEventListener("DOMContentLoaded", () => {
    $("login-form").addEventListener("submit", (e) => {
      e.preventDefault();
      start($("token").value.trim());
    });
    $("logout").addEventListener("click", () => logout("the token was removed from this tab"));
    $("live").addEventListener("click", () => goLive());
    $("slider").addEventListener("change", (e) => {
      const t = Number(e.target.value);
      if (t >= (state.last ?? t) && state.live) return;
      goTo(t);
    });
    $("outlines").addEventListener("change", () => enqueue(drawOutlines));
    const saved = sessionStorage.getItem(TOKEN_KEY);
    if (saved) start(saved); else logout("");
  });
}());
