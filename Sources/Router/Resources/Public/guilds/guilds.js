// The bot operator's view: every live guild session with now-playing, position and controls,
// refreshed every second through the REST API with the bot token.
import { explain } from "/api.js";

const $ = (id) => document.getElementById(id);
const KEY = "tonearm.botToken";
let timer = null;

function time(ms) {
  if (ms == null) return "–:––";
  const s = Math.max(0, Math.floor(ms / 1000));
  return Math.floor(s / 60) + ":" + String(s % 60).padStart(2, "0");
}

async function call(method, path, body) {
  const response = await fetch(path, {
    method,
    headers: { Authorization: `Bearer ${sessionStorage.getItem(KEY)}`, "Content-Type": "application/json" },
    body: body ? JSON.stringify(body) : undefined,
  });
  const json = await response.json().catch(() => null);
  if (!response.ok) throw json?.error || { message: `Request failed (${response.status}).` };
  return json;
}

function button(label, op, guild, args) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  b.dataset.op = op;
  b.onclick = async () => {
    try {
      await call("POST", `/api/sessions/${encodeURIComponent(guild)}/${op}`, args?.());
      $("message").textContent = "";
      refresh();
    } catch (error) {
      $("message").textContent = `${guild}: ${explain(error)}`;
    }
  };
  return b;
}

function row(session) {
  const tr = document.createElement("tr");
  tr.dataset.guild = session.session_id;
  const cell = (text) => { const td = document.createElement("td"); td.textContent = text; tr.append(td); return td; };
  cell(session.session_id);
  const track = session.now_playing;
  cell(track ? `${track.title || track.url} (${session.status})` : session.status);
  cell(`${time(session.position_ms)} / ${time(session.duration_ms)}`);
  cell(String(session.clients));
  const controls = cell("");
  const id = session.session_id;
  controls.append(
    button("Previous", "previous", id),
    session.status === "paused" || session.status === "idle" ? button("Resume", "resume", id) : button("Pause", "pause", id),
    button("Next", "next", id),
    button("Stop", "stop", id));
  const volume = document.createElement("input");
  volume.type = "number"; volume.min = 0; volume.max = 1000; volume.value = session.volume;
  volume.setAttribute("aria-label", `Volume of ${id}`);
  volume.onchange = () => call("POST", `/api/sessions/${encodeURIComponent(id)}/volume`, { volume: Number(volume.value) })
    .catch((error) => ($("message").textContent = `${id}: ${explain(error)}`));
  controls.append(volume);
  return tr;
}

async function refresh() {
  try {
    const { sessions: all } = await call("GET", "/api/sessions");
    // `/guilds/#<guild id>` (the Discord bot's /nowplaying links here): that guild alone.
    const only = focusedGuild();
    const sessions = only ? all.filter((session) => session.session_id === only) : all;
    $("connection").dataset.state = "connected";
    $("connection").textContent = "Signed in";
    $("guilds").hidden = sessions.length === 0;
    $("empty").hidden = sessions.length > 0;
    $("empty").textContent = only ? `Guild ${only} has no live session.` : "No guild session is live.";
    $("show-all").hidden = !only;
    if (!document.activeElement || document.activeElement.type !== "number") {
      $("guilds").tBodies[0].replaceChildren(...sessions.map(row));
    }
  } catch (error) {
    $("connection").dataset.state = "offline";
    $("connection").textContent = "Signed out";
    $("message").textContent = error?.code === "unauthorized" || error?.code === "forbidden"
      ? "That is not the bot token." : explain(error);
    clearInterval(timer);
    timer = null;
  }
}

function focusedGuild() {
  try {
    return decodeURIComponent(location.hash.slice(1));
  } catch {
    return "";
  }
}

function start() {
  $("message").textContent = "";
  refresh();
  clearInterval(timer);
  timer = setInterval(refresh, 1000);
}

$("sign-in").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(KEY, $("token").value.trim());
  start();
});
addEventListener("hashchange", () => { if (timer) refresh(); });
if (sessionStorage.getItem(KEY)) start();
