// The playground: one session per browser profile, its queue and controls, and its audio.
import { Connection, explain, identity } from "/api.js";
import { Player } from "/audio.js";
import { ListenPlayer, StreamPlayer } from "/stream-player.js";

const $ = (id) => document.getElementById(id);

// Inline icons: symbol characters depend on the fonts a device has; these do not.
const ICONS = {
  previous: '<path d="M6 5h2v14H6zM20 5v14L9 12z"/>',
  play: '<path d="M7 5v14l12-7z"/>',
  pause: '<path d="M6 5h4v14H6zM14 5h4v14h-4z"/>',
  next: '<path d="M16 5h2v14h-2zM4 5v14l11-7z"/>',
  stop: '<path d="M6 6h12v12H6z"/>',
  volume: '<path d="M4 9v6h4l5 4V5L8 9z"/><path d="M16 8.5a5 5 0 0 1 0 7" fill="none" stroke="currentColor" stroke-width="2"/>',
  muted: '<path d="M4 9v6h4l5 4V5L8 9z"/><path d="M16 9l5 6M21 9l-5 6" fill="none" stroke="currentColor" stroke-width="2"/>',
};
function icon(button, name) {
  if (button.dataset.icon === name && button.firstChild) return;
  button.dataset.icon = name;
  button.innerHTML = `<svg viewBox="0 0 24 24" width="20" height="20" fill="currentColor" aria-hidden="true">${ICONS[name]}</svg>`;
}
document.querySelectorAll("[data-icon]").forEach((button) => icon(button, button.dataset.icon));
// WebCodecs where the page is a secure context (HTTPS, localhost); elsewhere Media Source with the
// same packets; the Ogg stream only where neither exists. Each starts inside the user's click.
const mode = Player.supported ? "webcodecs" : StreamPlayer.supported ? "media-source" : "ogg";
let player = mode === "webcodecs" ? new Player() : mode === "media-source" ? new StreamPlayer($("fallback-audio")) : null;
let state = null, stateAt = 0, seeking = false, mutedFrom = null;
// The title changes when the new track is heard, not when its state arrives: a track's `ready`
// comes just before its first packet, which is heard once what the player holds ahead has played.
let titleShown = null, titleDueAt = 0, titleTimer = null;
let layerTimer = null;

const connection = new Connection({
  onState: (next) => {
    state = next;
    stateAt = performance.now();
    player?.follow(state.status === "playing" || state.status === "starting");
    render();
  },
  onEvent,
  onAudio: (packet) => player?.push(packet),
  onConnection: (status) => {
    const words = { connecting: "Connecting…", connected: "Connected", reconnecting: "Reconnecting…", offline: "Offline" };
    $("connection").dataset.state = status;
    $("connection").textContent = words[status] || status;
  },
});

// What tests (and the curious) can read from the console.
window.tonearm = {
  mode,
  get state() { return state; },
  get connection() { return $("connection").dataset.state; },
  get message() { return $("message").textContent; },
  get title() { return $("title").textContent; },
  get stats() { return player ? { ...player.stats, depth: player.depth, lead: player.lead } : null; },
  contextState: () => player?.state ?? "unsupported",
  dominantFrequency: () => player?.dominantFrequency() ?? 0,
  rms: (seconds) => player?.rms(seconds) ?? 0,
  samples: (seconds) => player?.samples(seconds) ?? new Float32Array(0),
  resetGaps: () => { if (player) player.stats.maxGapMs = 0; },
};

function say(text) { $("message").textContent = text || ""; }

// The equalizer: Lavalink's 15 bands; a gain g multiplies a band by 1 + 4g (0.25 = +6 dB).
const BANDS = [25, 40, 63, 100, 160, 250, 400, 630, 1000, 1600, 2500, 4000, 6300, 10000, 16000];
const PRESETS = {
  "flat": [],
  "bass boost": [0.25, 0.2, 0.15, 0.1, 0.05].map((gain, band) => ({ band, gain })),
  "treble boost": [0.05, 0.1, 0.15, 0.2, 0.2].map((gain, i) => ({ band: 10 + i, gain })),
  "vocals": [[0, -0.05], [1, -0.05], [7, 0.1], [8, 0.15], [9, 0.15], [10, 0.1]].map(([band, gain]) => ({ band, gain })),
  "soft": [-0.05, -0.1, -0.1, -0.15, -0.15].map((gain, i) => ({ band: 10 + i, gain })),
};
$("eq-bands").replaceChildren(...BANDS.map((hz, band) => {
  const label = document.createElement("label");
  const input = Object.assign(document.createElement("input"), { type: "range", min: -0.25, max: 1, step: 0.05, value: 0 });
  input.dataset.band = band;
  input.setAttribute("aria-label", `${hz < 1000 ? hz : hz / 1000 + "k"} Hz`);
  input.onchange = () => run("filters", { ...effects(), equalizer: bandGains().filter((entry) => entry.gain !== 0) });
  label.append(input, hz < 1000 ? String(hz) : `${hz / 1000}k`);
  return label;
}));
function bandGains() {
  return [...$("eq-bands").querySelectorAll("input")].map((input) => ({ band: Number(input.dataset.band), gain: Number(input.value) }));
}
$("eq-preset").onchange = () => run("filters", { ...effects(), equalizer: PRESETS[$("eq-preset").value] ?? [] });

// The other filters (Lavalink's shape, engine-api.md#filters): a preset each, or any JSON.
const EFFECTS = {
  "none": {},
  "8D": { rotation: { rotationHz: 0.2 } },
  "karaoke": { karaoke: { level: 1, monoLevel: 1, filterBand: 220, filterWidth: 100 } },
  "tremolo": { tremolo: { frequency: 4, depth: 0.5 } },
  "vibrato": { vibrato: { frequency: 4, depth: 0.5 } },
  "muffled": { lowPass: { smoothing: 20 } },
  "mono": { channelMix: { leftToLeft: 0.5, leftToRight: 0.5, rightToLeft: 0.5, rightToRight: 0.5 } },
  "nightcore": { timescale: { speed: 1, pitch: 1, rate: 1.25 } },
  "vaporwave": { timescale: { speed: 1, pitch: 1, rate: 0.8 } },
  "faster": { timescale: { speed: 1.5, pitch: 1, rate: 1 } },
};
/** The session's filters other than the equalizer. */
function effects() {
  const { equalizer, ...rest } = state.filters ?? {};
  return rest;
}
/** JSON with keys in order, so two objects with the same fields compare equal. */
function canonical(value) {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (value && typeof value === "object") {
    return `{${Object.keys(value).sort().map((key) => `${JSON.stringify(key)}:${canonical(value[key])}`).join(",")}}`;
  }
  return JSON.stringify(value);
}
$("effect").onchange = () => run("filters", { equalizer: state.filters?.equalizer ?? [], ...EFFECTS[$("effect").value] });
$("filters-json").onsubmit = (event) => {
  event.preventDefault();
  let filters;
  try {
    filters = JSON.parse($("filters-text").value);
  } catch {
    say("The filters are not JSON: write an object such as {\"tremolo\": {\"frequency\": 4, \"depth\": 0.5}}.");
    return;
  }
  run("filters", filters);
};
$("normalize").onchange = () => run("normalize", { enabled: $("normalize").checked });
$("cue").onchange = () => run("cue", { enabled: $("cue").checked });
function renderEffects() {
  if (document.activeElement !== $("normalize")) $("normalize").checked = state.normalize !== false;
  if (document.activeElement !== $("cue")) $("cue").checked = state.cue === true;
  const current = canonical(effects());
  if (document.activeElement !== $("effect")) {
    $("effect").value = Object.keys(EFFECTS).find((name) => canonical(EFFECTS[name]) === current) ?? "custom";
  }
  if (document.activeElement !== $("filters-text")) $("filters-text").value = JSON.stringify(state.filters ?? {});
}
function renderEqualizer() {
  const gains = new Array(BANDS.length).fill(0);
  for (const { band, gain } of state.filters?.equalizer ?? []) if (band in gains) gains[band] = gain;
  for (const input of $("eq-bands").querySelectorAll("input")) {
    if (document.activeElement !== input) input.value = gains[Number(input.dataset.band)];
  }
  const same = (preset) => BANDS.every((_, band) => (preset.find((entry) => entry.band === band)?.gain ?? 0) === gains[band]);
  if (document.activeElement !== $("eq-preset")) {
    $("eq-preset").value = Object.keys(PRESETS).find((name) => same(PRESETS[name])) ?? "custom";
  }
}

// Commands that mean "I want to hear something" start the player inside their click (browsers
// let audio start only from a gesture); pause and stop silence it at once.
const STARTS = new Set(["play", "queue", "resume", "jump", "next", "previous"]);
const STOPS = new Set(["pause", "stop"]);

async function run(op, args) {
  if (STARTS.has(op)) player?.start();
  else if (STOPS.has(op)) player?.pause();
  try {
    await connection.command(op, args);
    say("");
  } catch (error) {
    if (error?.code !== "superseded") say(explain(error));
  }
}

function onEvent(event) {
  if (event.type === "error" && event.code !== "superseded") say(explain(event));
  if (event.type === "finished") {
    player?.idle();
    if (event.code === "engine_restarted") say(explain(event));
  }
  if (event.type === "paused") player?.idle();
  // A sound over the music ("Play over", a `layer`): said while it is heard, from when what the
  // player holds ahead has played.
  if (event.type === "layer_started") {
    clearTimeout(layerTimer);
    layerTimer = setTimeout(() => say("Playing a sound over the music."), (player?.lead ?? 0) * 1000);
  }
  if (event.type === "layer_ended") {
    clearTimeout(layerTimer);
    say(event.reason === "error" ? explain(event) : "");
  }
  if (event.type === "ready") {
    say("");
    titleDueAt = performance.now() + (player?.lead ?? 0) * 1000;
  }
}

// ---- rendering ------------------------------------------------------------------------------

function time(ms) {
  if (ms == null || !isFinite(ms)) return "–:––";
  const seconds = Math.max(0, Math.floor(ms / 1000));
  const h = Math.floor(seconds / 3600), m = Math.floor((seconds % 3600) / 60), s = seconds % 60;
  return (h ? h + ":" + String(m).padStart(2, "0") : m) + ":" + String(s).padStart(2, "0");
}

function position() {
  if (!state) return 0;
  // A timescale makes the track's time run at speed × rate.
  const timescale = state.filters?.timescale ?? {};
  const rate = (timescale.speed ?? 1) * (timescale.rate ?? 1);
  const moved = state.status === "playing" ? (performance.now() - stateAt) * rate : 0;
  return Math.min(state.position_ms + moved, state.duration_ms ?? Infinity);
}

/** Shows `text` as the title at the moment the track it names is heard (at once when nothing
 *  is held ahead, or the title did not come with a new track). */
function showTitle(text) {
  if (text === titleShown) return;
  clearTimeout(titleTimer);
  const wait = titleDueAt - performance.now();
  const show = () => { $("title").textContent = titleShown = text; };
  if (titleShown === null || wait <= 5 || wait > 3000) show();
  else titleTimer = setTimeout(show, wait);
}

function render() {
  if (!state) return;
  const track = state.now_playing;
  showTitle(track ? track.title || track.url : "Nothing playing");
  const words = { idle: track ? "Stopped" : "Add something below.", starting: "Starting…", playing: "Playing", paused: "Paused" };
  $("subtitle").textContent = words[state.status] || state.status;
  $("thumbnail").hidden = !track?.thumbnail;
  if (track?.thumbnail) $("thumbnail").src = track.thumbnail;
  const playing = state.status === "playing" || state.status === "starting";
  icon($("toggle"), playing ? "pause" : "play");
  $("toggle").setAttribute("aria-label", playing ? "Pause" : "Play");
  $("seek").disabled = !track || !state.duration_ms || state.status === "idle";
  $("seek").max = state.duration_ms || 0;
  $("total").textContent = time(state.duration_ms);
  if (document.activeElement !== $("volume")) $("volume").value = Math.min(150, state.volume);
  icon($("mute"), state.volume === 0 ? "muted" : "volume");
  $("mute").setAttribute("aria-label", state.volume === 0 ? "Unmute" : "Mute");
  $("loop").value = state.loop;
  renderCrossfade();
  renderEqualizer();
  renderEffects();
  renderQueue();
}

function renderQueue() {
  const list = $("queue");
  list.replaceChildren(...state.queue.map((track, index) => {
    const item = document.createElement("li");
    if (index === state.current) { item.className = "current"; item.setAttribute("aria-current", "true"); }
    const row = document.createElement("div");
    row.className = "row";
    const jump = document.createElement("button");
    jump.className = "jump";
    jump.textContent = track.title || track.url;
    jump.title = "Play this";
    jump.onclick = () => run("jump", { index });
    const duration = document.createElement("span");
    duration.className = "duration";
    duration.textContent = track.duration_ms ? time(track.duration_ms) : "";
    const remove = document.createElement("button");
    remove.textContent = "✕";
    remove.title = "Remove from the queue";
    remove.setAttribute("aria-label", `Remove ${track.title || track.url}`);
    remove.onclick = () => run("remove", { index });
    row.append(jump, duration, remove);
    item.append(row);
    return item;
  }), ...(state.resolving ?? []).map(({ url, command }) => {
    // A link still being looked up: it becomes a track (or an error) when the server knows.
    const item = document.createElement("li");
    item.className = "resolving";
    item.textContent = `${command === "play" ? "Finding (to play now)" : "Finding"} ${url}…`;
    return item;
  }));
  $("queue-empty").hidden = state.queue.length + (state.resolving?.length ?? 0) > 0;
}

function tick() {
  if (state && !seeking) {
    const now = position();
    $("elapsed").textContent = time(now);
    $("seek").value = now;
  }
  requestAnimationFrame(tick);
}

// ---- search ---------------------------------------------------------------------------------

const looksPlayable = (text) => /^[a-z]+:\/\//i.test(text) || /\.[a-z0-9]{2,5}$/i.test(text);
let searchTimer = null, searchSerial = 0;

function scheduleSearch() {
  clearTimeout(searchTimer);
  const text = $("url").value.trim();
  if (text.length < 3 || looksPlayable(text)) return showResults([]);
  searchTimer = setTimeout(async () => {
    const serial = ++searchSerial;
    try {
      const results = await connection.search(text);
      if (serial === searchSerial) showResults(results);
    } catch (error) {
      if (serial === searchSerial) { showResults([]); say(explain(error)); }
    }
  }, 400);
}

function showResults(results) {
  const list = $("results");
  list.hidden = results.length === 0;
  list.replaceChildren(...results.map((result) => {
    const item = document.createElement("li");
    if (result.thumbnail) {
      const image = document.createElement("img");
      image.src = result.thumbnail;
      image.alt = "";
      item.append(image);
    }
    const text = document.createElement("span");
    text.className = "grow";
    text.textContent = `${result.title || result.url}${result.duration_ms ? " · " + time(result.duration_ms) : ""}`;
    const play = document.createElement("button");
    play.type = "button";
    play.textContent = "Play";
    play.onclick = () => { showResults([]); run("play", { url: result.url }); };
    const add = document.createElement("button");
    add.type = "button";
    add.textContent = "Add";
    add.onclick = () => { showResults([]); run("queue", { url: result.url }); };
    item.append(text, play, add);
    return item;
  }));
}

// ---- wiring ---------------------------------------------------------------------------------

function submit(op) {
  const url = $("url").value.trim();
  if (!url) return say(explain({ code: "missing_url" }));
  showResults([]);
  run(op, { url });
}

$("add").addEventListener("submit", (event) => { event.preventDefault(); submit("play"); });
$("enqueue").addEventListener("click", () => submit("queue"));
$("play-over").addEventListener("click", () => submit("layer"));
$("url").addEventListener("input", scheduleSearch);
$("previous").onclick = () => run("previous");
$("next").onclick = () => run("next");
$("stop").onclick = () => run("stop");
$("toggle").onclick = togglePlayback;
$("shuffle").onclick = () => run("shuffle");
$("clear").onclick = () => run("clear");
$("loop").onchange = () => run("loop", { mode: $("loop").value });
$("crossfade").onchange = () => run("crossfade", { crossfade_ms: Number($("crossfade").value) });
function renderCrossfade() {
  const select = $("crossfade");
  const value = String(state.crossfade_ms ?? 0);
  // A length set elsewhere (a bot, the API) gets an entry of its own.
  if (![...select.options].some((option) => option.value === value)) {
    select.add(new Option(`${Number(value) / 1000} s`, value));
  }
  if (document.activeElement !== select) select.value = value;
}
$("volume").onchange = () => { mutedFrom = null; run("volume", { volume: Number($("volume").value) }); };
$("mute").onclick = () => {
  if (!state) return;
  if (state.volume === 0) run("volume", { volume: mutedFrom ?? 100 });
  else { mutedFrom = state.volume; run("volume", { volume: 0 }); }
};
$("seek").addEventListener("input", () => { seeking = true; $("elapsed").textContent = time(Number($("seek").value)); });
$("seek").addEventListener("change", async () => {
  await run("seek", { position_ms: Math.round(Number($("seek").value)) });
  seeking = false;
});

function togglePlayback() {
  if (!state) return;
  if (state.status === "playing" || state.status === "starting") return run("pause");
  if (state.status === "paused" || state.now_playing) return run("resume");
  if (state.queue.length) return run("jump", { index: 0 });
  $("url").focus();
}

// A link for listeners: the session's HLS page with a token that hears and cannot control.
$("share").addEventListener("click", async () => {
  try {
    const { page } = await connection.listenToken();
    const link = $("share-link");
    link.href = new URL(page, location.href).href;
    link.textContent = link.href;
    link.hidden = false;
  } catch (error) {
    say(explain(error));
  }
});

document.addEventListener("keydown", (event) => {
  const typing = ["INPUT", "SELECT", "TEXTAREA"].includes(event.target.tagName) && event.target.type !== "range";
  if (event.code === "Space" && !typing && event.target.tagName !== "BUTTON") {
    event.preventDefault();
    togglePlayback();
  }
});
// Browsers that need a gesture before audio may play get one from any click or key (a page
// reloaded while its session plays starts hearing it at the first touch).
document.addEventListener("pointerdown", () => player?.unlock());
document.addEventListener("keydown", () => player?.unlock());

async function main() {
  const me = await identity();
  $("session").textContent = me.session_id;
  if (mode === "ogg") {
    player = new ListenPlayer($("fallback-audio"), `/listen/${encodeURIComponent(me.session_id)}.ogg?chain=0&token=${encodeURIComponent(me.token)}`);
  }
  // The AudioContext exists from the start (it runs at once where autoplay is allowed, else from
  // the first gesture); the media element waits for a gesture in any case.
  if (mode === "webcodecs") player.start();
  $("fallback").hidden = mode === "webcodecs";
  $("fallback").dataset.mode = mode;
  await connection.open();
  requestAnimationFrame(tick);
}

main().catch((error) => say(explain(error)));
