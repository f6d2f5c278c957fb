// The playground: subscribes to one session over /ws, decodes its Opus packets with WebCodecs
// and plays them through Web Audio with a small jitter buffer.

const $ = (id) => document.getElementById(id);
const sessionInput = $("session");
let identity = JSON.parse(localStorage.getItem("tonearm.identity") || "null");

// One anonymous identity per browser profile: every tab of this user shares its session.
async function ensureIdentity() {
  if (identity) return identity;
  const response = await fetch("/api/identity", { method: "POST" });
  identity = await response.json();
  localStorage.setItem("tonearm.identity", JSON.stringify(identity));
  return identity;
}

const START_BUFFER_S = 0.12; // start after ~120 ms buffered
let audio, decoder, socket, playhead = 0, timestamp = 0;

// What the page decoded, for tests and curious users: the last second of the left channel.
const recent = new Float32Array(48000);
let recentWrite = 0;
window.tonearm = {
  decodedFrames: 0,
  lastSecond() {
    const out = new Float32Array(recent.length);
    out.set(recent.subarray(recentWrite));
    out.set(recent.subarray(0, recentWrite), recent.length - recentWrite);
    return out;
  },
  contextState() { return audio ? audio.state : "none"; },
};

function setStatus(text) { $("status").textContent = text; }

function ensureAudio() {
  if (typeof AudioDecoder === "undefined") {
    setStatus("This browser cannot decode Opus here (WebCodecs needs https or localhost).");
    return false;
  }
  if (!audio) audio = new AudioContext({ sampleRate: 48000, latencyHint: "interactive" });
  if (audio.state === "suspended") audio.resume();
  if (!decoder) {
    decoder = new AudioDecoder({ output: schedule, error: (e) => setStatus("Decoder error: " + e.message) });
    decoder.configure({ codec: "opus", sampleRate: 48000, numberOfChannels: 2 });
  }
  return true;
}

function schedule(data) {
  const frames = data.numberOfFrames;
  const buffer = audio.createBuffer(2, frames, 48000);
  for (let c = 0; c < 2; c++) {
    const channel = new Float32Array(frames);
    data.copyTo(channel, { planeIndex: c, format: "f32-planar" });
    buffer.copyToChannel(channel, c);
    if (c === 0) {
      for (let i = 0; i < frames; i++) { recent[recentWrite] = channel[i]; recentWrite = (recentWrite + 1) % recent.length; }
    }
  }
  data.close();
  window.tonearm.decodedFrames++;
  const now = audio.currentTime;
  // Behind the clock (start, or after a stall): restart with a fresh buffer instead of piling up delay.
  if (playhead < now) playhead = now + START_BUFFER_S;
  const source = audio.createBufferSource();
  source.buffer = buffer;
  source.connect(audio.destination);
  source.start(playhead);
  playhead += buffer.duration;
}

async function connect() {
  const { token, session_id: id } = await ensureIdentity();
  sessionInput.value = id;
  if (socket) { socket.onclose = null; socket.close(); }
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  socket = new WebSocket(`${scheme}://${location.host}/ws?token=${encodeURIComponent(token)}`);
  socket.binaryType = "arraybuffer";
  socket.onopen = () => setStatus(`Connected to session ${id}.`);
  socket.onclose = () => { setStatus("Disconnected; reconnecting…"); setTimeout(connect, 1000); };
  socket.onmessage = (message) => {
    if (typeof message.data === "string") return onEvent(JSON.parse(message.data));
    if (!decoder || decoder.state !== "configured") return;
    decoder.decode(new EncodedAudioChunk({ type: "key", timestamp, data: message.data }));
    timestamp += 20000;
  };
}

function onEvent(event) {
  if (event.type === "ready") $("now-playing").textContent = "Now playing: " + (event.title || event.url);
  if (event.type === "finished") $("now-playing").textContent = event.reason === "finished" ? "Finished." : "Stopped.";
  if (event.type === "error") setStatus("Cannot play this: " + event.message);
}

async function post(path, body) {
  const { token, session_id: id } = await ensureIdentity();
  const response = await fetch(`/api/sessions/${encodeURIComponent(id)}/${path}`, {
    method: "POST",
    headers: { "Content-Type": "application/json", "Authorization": `Bearer ${token}` },
    body: body ? JSON.stringify(body) : undefined,
  });
  if (!response.ok) {
    const problem = await response.json().catch(() => null);
    setStatus(problem?.error?.message || `Request failed (${response.status}).`);
  }
}

$("controls").addEventListener("submit", (e) => {
  e.preventDefault();
  if (!ensureAudio()) return;
  if (!socket || socket.readyState > 1) connect();
  post("play", { url: $("url").value.trim() });
});
$("stop").addEventListener("click", () => post("stop"));
connect();
