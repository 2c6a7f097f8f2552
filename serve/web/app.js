// FramePack's page. It uses only the HTTP API (/api/openapi.json), with
// the token, when the server has one, in the Authorization header: it is
// read once from the address (#token=…) or typed in, and kept for the tab.
"use strict";

const $ = (sel, el = document) => el.querySelector(sel);
const state = { options: null, jobs: [], following: null, followAbort: null, blobs: new Map(), liveVideoJob: null, liveVideoURL: "" };

// --- API ---------------------------------------------------------------

function token() {
  const m = location.hash.match(/token=([^&]+)/);
  if (m) {
    sessionStorage.setItem("framepack-token", decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname);
  }
  return sessionStorage.getItem("framepack-token") || "";
}

function headers(extra = {}) {
  const h = { ...extra };
  const t = token();
  if (t) h["Authorization"] = "Bearer " + t;
  return h;
}

class APIError extends Error {
  constructor(status, msg) { super(msg); this.status = status; }
}

async function api(method, path, body, extra = {}) {
  const res = await fetch(path, { method, headers: headers(extra), body });
  if (res.status === 401) {
    $("#token-box").hidden = false;
  }
  if (!res.ok) {
    let msg = res.status + " " + res.statusText;
    try { msg = (await res.json()).error || msg; } catch (e) { /* not JSON */ }
    throw new APIError(res.status, msg);
  }
  if (res.status === 204) return null;
  const ct = res.headers.get("Content-Type") || "";
  return ct.startsWith("application/json") ? res.json() : res.blob();
}

// blobURL fetches a file with the token and returns an object URL for it,
// kept per path (a path with ?section=… changes with the content).
async function blobURL(path) {
  if (state.blobs.has(path)) return state.blobs.get(path);
  const blob = await api("GET", path);
  const url = URL.createObjectURL(blob);
  state.blobs.set(path, url);
  return url;
}

function dropBlob(path) {
  const url = state.blobs.get(path);
  if (url) { URL.revokeObjectURL(url); state.blobs.delete(path); }
}

// stream reads a server-sent event stream through fetch (so it carries the
// token) and calls on(event, data) for each event, reconnecting after a
// break until signal aborts or the server sends "end".
async function stream(path, on, signal) {
  for (;;) {
    try {
      const res = await fetch(path, { headers: headers(), signal });
      if (res.status === 401) $("#token-box").hidden = false;
      if (!res.ok) throw new APIError(res.status, res.statusText);
      setConn(true);
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          let ev = "message", data = "";
          for (const line of block.split("\n")) {
            if (line.startsWith("event: ")) ev = line.slice(7);
            else if (line.startsWith("data: ")) data += line.slice(6);
          }
          if (!data) continue;
          if (ev === "end") return;
          on(ev, JSON.parse(data));
        }
      }
    } catch (e) {
      if (signal && signal.aborted) return;
      setConn(false);
    }
    await new Promise(r => setTimeout(r, 2000));
    if (signal && signal.aborted) return;
  }
}

function setConn(ok) {
  const c = $("#conn");
  c.textContent = ok ? "live" : "reconnecting…";
  c.classList.toggle("bad", !ok);
}

function showError(msg) {
  const e = $("#error");
  e.textContent = msg;
  e.hidden = !msg;
}

// --- the form ----------------------------------------------------------

const fields = {
  prompt: ["#prompt", "text"], negative_prompt: ["#negative", "text"], seed: ["#seed", "int"], seed_random: ["#seed-random", "bool"],
  seconds: ["#seconds", "num"], steps: ["#steps", "int"], window: ["#window", "int"], cfg: ["#cfg", "num"], gs: ["#gs", "num"],
  rs: ["#rs", "num"], cache: ["#cache", "text"], cache_threshold: ["#cache-threshold", "num"], magcache_k: ["#magcache-k", "int"],
  magcache_retention: ["#magcache-retention", "num"], resolution: ["#resolution", "int"], model: ["#model-variant", "text"],
  prompt_blend: ["#prompt-blend", "int"], embed_interpolation: ["#embed-interpolation", "text"],
  start_embed_strength: ["#start-embed-strength", "num"], crf: ["#crf", "int"], preserve: ["#preserve", "text"],
  video_context_frames: ["#video-context-frames", "int"], new_only: ["#new-only", "bool"],
};

// cacheOf is a job's step cache; an older job's says only teacache.
const cacheOf = s => s.cache || (s.teacache ? "teacache" : "none");

// fillForm sets the form from settings s: a key s leaves out (MagCache's
// knobs of a job without it, say) takes the server's default.
function fillForm(s) {
  s = { ...(state.options ? state.options.defaults : {}), ...s, cache: cacheOf(s) };
  for (const [key, [sel, kind]] of Object.entries(fields)) {
    const el = $(sel);
    const v = s[key];
    if (kind === "bool") el.checked = !!v;
    else if (v === undefined || v === null) el.value = key === "embed_interpolation" ? "disabled" : "";
    else el.value = v;
  }
  if (!s.cache_threshold) $("#cache-threshold").value = "";
  $("#seed-random").checked = false;
  showCacheKnobs();
  for (const row of document.querySelectorAll("#loras .lora")) {
    const l = (s.lora || []).find(x => x.name === row.dataset.name);
    $("input[type=checkbox]", row).checked = !!l;
    $("input[type=number]", row).value = l ? l.weight : 1;
  }
}

function readForm() {
  const s = {};
  for (const [key, [sel, kind]] of Object.entries(fields)) {
    const el = $(sel);
    if (kind === "bool") s[key] = el.checked;
    else if (kind === "text") s[key] = el.value;
    else if (el.value !== "") s[key] = kind === "int" ? parseInt(el.value, 10) : parseFloat(el.value);
  }
  if (!$("#end-image").files.length) delete s.embed_interpolation;
  if (s.cache !== "magcache") { delete s.magcache_k; delete s.magcache_retention; }
  if (!$("#video").files.length) { delete s.video_context_frames; delete s.new_only; }
  s.lora = [];
  for (const row of document.querySelectorAll("#loras .lora")) {
    if ($("input[type=checkbox]", row).checked) s.lora.push({ name: row.dataset.name, weight: parseFloat($("input[type=number]", row).value) || 1 });
  }
  return s;
}

function setupDrop(dropSel, inputSel, previewSel, onChange) {
  const drop = $(dropSel), input = $(inputSel), img = $(previewSel);
  const show = () => {
    const f = input.files[0];
    if (img.src.startsWith("blob:")) URL.revokeObjectURL(img.src);
    img.hidden = !f;
    if (f) img.src = URL.createObjectURL(f);
    if (onChange) onChange(f);
  };
  input.addEventListener("change", show);
  drop.addEventListener("dragover", e => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", e => {
    e.preventDefault();
    drop.classList.remove("over");
    if (e.dataTransfer.files.length) {
      input.files = e.dataTransfer.files;
      show();
    }
  });
  return show;
}

// showCacheKnobs shows MagCache's knobs with MagCache only.
function showCacheKnobs() {
  for (const l of document.querySelectorAll("label.magcache")) l.hidden = $("#cache").value !== "magcache";
}

// showVideoMode shows the video's options, and hides the start image, while
// a video to extend is chosen.
function showVideoMode(f) {
  $("#video-clear").hidden = $("#video-options").hidden = !f;
  $("#image-drop").hidden = !!f;
  $(".images").classList.toggle("video", !!f);
}

// setFile puts a fetched image or video into a file input.
function setFile(inputSel, blob, name) {
  const dt = new DataTransfer();
  dt.items.add(new File([blob], name, { type: blob.type }));
  $(inputSel).files = dt.files;
  $(inputSel).dispatchEvent(new Event("change"));
}

async function submit(e) {
  e.preventDefault();
  const msg = $("#form-msg");
  const image = $("#image").files[0], video = $("#video").files[0];
  if (!image && !video) { msg.textContent = "Choose a start image (or a video to extend) first."; return; }
  const fd = new FormData();
  fd.append("settings", JSON.stringify(readForm()));
  if (video) fd.append("video", video, video.name);
  else fd.append("image", image, image.name);
  const end = $("#end-image").files[0];
  if (end) fd.append("end_image", end, end.name);
  $("#start").disabled = true;
  try {
    // One key per submission: a retried request returns the same job.
    const job = await api("POST", "/api/jobs", fd, { "Idempotency-Key": crypto.randomUUID ? crypto.randomUUID() : String(Math.random()) });
    msg.textContent = job.status === "queued" && job.position > 1 ? `Queued, ${job.position - 1} ahead.` : "Started.";
    showError("");
    refresh();
  } catch (err) {
    msg.textContent = "";
    showError("Not started: " + err.message);
  } finally {
    $("#start").disabled = false;
  }
}

// --- the running job -----------------------------------------------------

function fmtTime(s) {
  if (!s || !isFinite(s)) return "";
  if (s < 1) return "under 1 s";
  s = Math.round(s);
  return s >= 60 ? `${Math.floor(s / 60)} min ${s % 60} s` : `${s} s`;
}

function follow(job) {
  if (state.following === job.id) return;
  if (state.followAbort) state.followAbort.abort();
  state.following = job.id;
  const ctl = new AbortController();
  state.followAbort = ctl;
  $("#live").hidden = false;
  $("#live-idle").hidden = true;
  $("#live-prompt").textContent = job.settings.prompt || "(no prompt)";
  $("#stage").textContent = "starting…";
  $("#live-video-box").hidden = true; // the last job's video, until this one's first section
  $("#progress").value = 0;
  $("#pace").textContent = $("#eta").textContent = "";
  stream(`/api/jobs/${job.id}/events`, (ev, d) => onJobEvent(job.id, ev, d), ctl.signal).then(() => {
    if (state.following === job.id) { state.following = null; refresh(); }
  });
}

function onJobEvent(id, ev, d) {
  if (state.following !== id) return;
  switch (ev) {
  case "progress": {
    let text = d.stage;
    if (d.sections) text = `Section ${d.section} of ${d.sections}`;
    if (d.stage === "sample" && d.steps) text += ` · step ${d.step} of ${d.steps}`;
    else if (d.stage) text += ` · ${d.stage}`;
    $("#stage").textContent = text;
    if (d.sections && d.steps) {
      const done = (d.section - 1) * d.steps + (d.stage === "sample" ? d.step : d.steps);
      $("#progress").max = d.sections * d.steps;
      $("#progress").value = done;
    }
    $("#pace").textContent = d.s_per_step ? `${d.s_per_step.toFixed(2)} s/step` : "";
    $("#eta").textContent = d.eta_s ? `about ${fmtTime(d.eta_s)} left` : "";
    break;
  }
  case "preview": {
    const img = $("#preview");
    img.src = "data:image/png;base64," + d.png;
    img.dataset.updates = String(parseInt(img.dataset.updates, 10) + 1);
    break;
  }
  case "section-video":
    showVideo(d.url, `Video so far: section ${d.section} of ${d.sections}, ${d.seconds.toFixed(2)} s`, id);
    break;
  case "state":
    if (d.status !== "running" && d.status !== "queued") {
      $("#stage").textContent = d.status;
      if (d.status === "done") showVideo(d.links.video, `Finished: ${d.result.seconds.toFixed(2)} s, ${d.result.width}×${d.result.height}`, id);
    }
    break;
  }
}

async function showVideo(path, caption, id) {
  try {
    const url = await blobURL(path);
    const v = $("#live-video");
    if (state.liveVideoURL && state.liveVideoURL !== url && state.liveVideoURL.includes("partial")) dropBlob(state.liveVideoURL);
    v.src = url;
    v.dataset.job = id;
    v.dataset.path = path;
    $("#live-video-box").hidden = false;
    $("#live-video-caption").textContent = caption;
    v.play().catch(() => {});
  } catch (e) { /* the next event retries */ }
}

// --- the queue and the history ------------------------------------------

let refreshing = null, again = false;
async function refresh() {
  if (refreshing) { again = true; return; }
  refreshing = (async () => {
    try {
      const r = await api("GET", "/api/jobs");
      state.jobs = r.jobs;
      render();
      setConn(true);
    } catch (e) {
      setConn(false);
    }
  })();
  await refreshing;
  refreshing = null;
  if (again) { again = false; refresh(); }
}

function settingsText(j) {
  const s = j.settings;
  const parts = [`${s.model === "f1" ? "F1" : "FramePack"}`, `${s.seconds} s`, `${s.steps} steps`, `seed ${s.seed}`, `gs ${s.gs}`,
    `${s.resolution}px`];
  if (j.video) parts.unshift(`extends a video of ${j.video.frames} frames${s.new_only ? " (new frames only)" : ""}`);
  if (s.cfg !== 1) parts.push(`cfg ${s.cfg}`);
  const cache = cacheOf(s);
  if (cache === "teacache") parts.push("TeaCache");
  if (cache === "magcache") parts.push(`MagCache (K ${s.magcache_k}, retention ${s.magcache_retention})`);
  if (s.lora && s.lora.length) parts.push("LoRA " + s.lora.map(l => `${l.name}×${l.weight}`).join(", "));
  return parts.join(" · ");
}

function timesText(j) {
  const t = d => d ? new Date(d).toLocaleTimeString() : "";
  let s = "queued " + t(j.created);
  if (j.started) s += ", started " + t(j.started);
  if (j.finished) s += ", ended " + t(j.finished);
  if (j.started && j.finished) s += ` (${fmtTime((new Date(j.finished) - new Date(j.started)) / 1000)})`;
  return s;
}

function el(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const k of kids) if (k) e.append(k);
  return e;
}

function thumb(j) {
  const img = el("img", { class: "thumb", alt: "" });
  blobURL(j.links.thumbnail + (j.status === "done" ? "?done" : "")).then(u => { img.src = u; }).catch(() => {});
  return img;
}

async function act(fn) {
  try { await fn(); showError(""); } catch (e) { showError(e.message); }
  refresh();
}

function render() {
  const running = state.jobs.find(j => j.status === "running");
  if (running) follow(running);
  else if (!state.following) { $("#live").hidden = true; $("#live-idle").hidden = false; }

  const tbody = $("#queue tbody");
  tbody.replaceChildren(...state.jobs.map(j => {
    const buttons = el("td", { class: "actions" });
    if (j.status === "queued") {
      if (j.position > 1) buttons.append(el("button", { type: "button", class: "up", text: "↑ up", onclick: () => act(() => api("POST", `/api/jobs/${j.id}/up`)) }));
      buttons.append(el("button", { type: "button", class: "cancel", text: "Cancel", onclick: () => act(() => api("DELETE", `/api/jobs/${j.id}`)) }));
    } else if (j.status === "running") {
      buttons.append(el("button", { type: "button", class: "cancel", text: "Cancel", onclick: () => act(() => api("DELETE", `/api/jobs/${j.id}`)) }));
    }
    let status = j.status;
    if (j.status === "queued") status += ` #${j.position}`;
    if (j.status === "running" && j.sections) status += ` ${j.section}/${j.sections}`;
    if (j.status === "queued" && j.unrunnable) status += j.unrunnable === "no worker is live" ? " (no worker is live)" : " (no worker can run it)";
    const st = el("td", { class: "status " + j.status, text: status });
    if (j.error) st.title = j.error;
    if (j.unrunnable) st.title = j.unrunnable;
    return el("tr", { "data-id": j.id, "data-status": j.status }, el("td", {}, thumb(j)), st,
      el("td", { class: "prompt", text: j.settings.prompt || "(no prompt)" }), el("td", { class: "settings", text: settingsText(j) }),
      el("td", { class: "times", text: timesText(j) }), buttons);
  }));

  const done = state.jobs.filter(j => j.status === "done");
  const gallery = $("#history");
  const have = new Map([...gallery.children].map(c => [c.dataset.id, c]));
  gallery.replaceChildren(...done.map(j => have.get(j.id) || card(j)));
}

function card(j) {
  // The thumbnail until played: a long history loads no video it does not show.
  const poster = el("img", { class: "poster", alt: "play", title: "play" });
  blobURL(j.links.thumbnail + "?done").then(u => { poster.src = u; }).catch(() => {});
  const media = el("div", { class: "media" }, poster);
  poster.addEventListener("click", async () => {
    const video = el("video", { controls: "", loop: "", playsinline: "", autoplay: "" });
    video.muted = true;
    try { video.src = await blobURL(j.links.video); } catch (e) { showError(e.message); return; }
    media.replaceChildren(video);
  });
  const download = (path, name) => async () => {
    const a = el("a", { href: await blobURL(path), download: name });
    document.body.append(a);
    a.click();
    a.remove();
  };
  return el("div", { class: "card", "data-id": j.id },
    media,
    el("div", { class: "prompt", text: j.settings.prompt || "(no prompt)" }),
    el("div", { class: "settings", text: settingsText(j) + ` · ${j.result.frames} frames` +
      (j.result.input_frames ? ` (the input's ${j.result.input_frames}, then ${j.result.frames - j.result.input_frames} new)` : "") }),
    el("div", { class: "actions" },
      el("button", { type: "button", class: "use", text: "Use these settings", onclick: () => useSettings(j) }),
      el("button", { type: "button", class: "download", text: "Video", onclick: () => act(download(j.links.video, `framepack-${j.id}.mp4`)) }),
      el("button", { type: "button", class: "download-settings", text: "Settings", onclick: () => act(download(j.links.settings, `framepack-${j.id}.json`)) }),
      el("button", { type: "button", class: "delete", text: "Delete", onclick: () => act(() => api("DELETE", `/api/jobs/${j.id}`)) })));
}

async function useSettings(j) {
  fillForm(j.settings);
  try {
    if (j.links.input_video) setFile("#video", await api("GET", j.links.input_video), j.video.name || "video");
    else {
      clearVideo();
      setFile("#image", await api("GET", j.links.image), j.image.name || "image");
    }
    if (j.links.end_image) setFile("#end-image", await api("GET", j.links.end_image), j.end_image.name || "end-image");
  } catch (e) { showError("The job's " + (j.links.input_video ? "video: " : "image: ") + e.message); }
  $("#form-panel").scrollIntoView({ behavior: "smooth" });
  $("#form-msg").textContent = "Settings of the job filled in.";
}

// --- start ---------------------------------------------------------------

let clearVideo = () => {};

async function start() {
  setupDrop("#image-drop", "#image", "#image-preview");
  const showEnd = setupDrop("#end-image-drop", "#end-image", "#end-image-preview", f => { $("#end-image-clear").hidden = !f; });
  $("#end-image-clear").addEventListener("click", () => { $("#end-image").value = ""; showEnd(); });
  const showVideoInput = setupDrop("#video-drop", "#video", "#video-preview", showVideoMode);
  clearVideo = () => { $("#video").value = ""; showVideoInput(); };
  $("#video-clear").addEventListener("click", () => clearVideo());
  $("#cache").addEventListener("change", showCacheKnobs);
  $("#job-form").addEventListener("submit", submit);
  $("#cancel-running").addEventListener("click", () => state.following && act(() => api("DELETE", `/api/jobs/${state.following}`)));
  // A token given in the address of an open page: start again with it.
  window.addEventListener("hashchange", () => { if (/token=/.test(location.hash)) { token(); location.reload(); } });
  $("#token-save").addEventListener("click", () => {
    sessionStorage.setItem("framepack-token", $("#token").value.trim());
    location.reload();
  });
  try {
    const o = await api("GET", "/api/options");
    state.options = o;
    $("#model").textContent = o.tiny_model ? "tiny model" : o.model;
    $("#tiny-banner").hidden = !o.tiny_model;
    const box = $("#loras");
    for (const name of o.loras) {
      box.append(el("label", { class: "lora", "data-name": name }, el("input", { type: "checkbox" }), " " + name + " ",
        el("input", { type: "number", step: "0.05", value: "1", min: "-10", max: "10" })));
    }
    $("#lora-set").hidden = o.loras.length === 0;
    $("#video-drop").hidden = !o.video_input;
    fillForm(o.defaults);
    const h = await api("GET", "/api/health");
    $("#version").textContent = [h.version, h.device, "NATS " + h.nats].filter(Boolean).join(" · ");
  } catch (e) {
    showError("The server does not answer: " + e.message);
  }
  refresh();
  // Every job's state changes: the queue and the history follow them.
  stream("/api/events", () => refresh());
}

start();
