// The listener's page: `/radio/?session={id}&token={token}` plays the session's HLS stream
// (`hls-player.js`) and shows the title of the track being heard. `&player=native` asks for the
// browser's own HLS instead of Media Source (tests use it to check both).
import { HLSPlayer } from "/radio/hls-player.js";

const $ = (id) => document.getElementById(id);
const query = new URLSearchParams(location.search);
const session = query.get("session") ?? "";
const token = query.get("token") ?? "";
const words = {
  idle: "Not started", loading: "Loading…", live: "Live", paused: "Silent", ended: "Ended", error: "Error",
};
const badges = { live: "connected", paused: "reconnecting", ended: "offline", error: "offline" };

function show(player) {
  $("state").textContent = words[player.state];
  $("state").dataset.state = badges[player.state] ?? "connecting";
  if (player.title) {
    $("title").textContent = player.title;
    $("artist").textContent = player.artist;
  }
  $("message").textContent = player.state === "error" ? player.error
    : player.state === "ended" ? "The session has stopped playing; this page goes on if it plays again."
    : player.state === "paused" ? "The session is silent (paused, or between tracks)." : "";
  $("listen").textContent = player.state === "idle" || $("audio").paused ? "Listen" : "Pause";
}

const audio = $("audio");
const mode = query.get("player") ?? HLSPlayer.mode(audio);
let player = null;
if (!session || !mode) {
  $("title").textContent = !session ? "No session given." : "This browser cannot play HLS with Opus.";
  $("listen").disabled = true;
} else {
  const url = `/hls/${encodeURIComponent(session)}/index.m3u8` + (token ? `?token=${encodeURIComponent(token)}` : "");
  player = new HLSPlayer(audio, url, { mode, onchange: show });
  window.radio = player;
  $("listen").addEventListener("click", () => {
    if (player.state === "idle" || audio.paused) player.start();
    else audio.pause();
    show(player);
  });
  audio.addEventListener("play", () => show(player));
  audio.addEventListener("pause", () => show(player));
}
