// The page's link to the Router: an identity kept in localStorage (tabs of one browser profile
// share it, so they share a session), one WebSocket that reconnects with backoff, and commands
// sent over it (answered by replies matched on their id) or over REST while it is down.

const IDENTITY_KEY = "tonearm.identity";

/** Forgets this browser's identity: the Router no longer accepts it (its signing secret
 * changed, or the stored value was damaged). The next `identity()` asks for a new one — a new,
 * empty session. */
function forgetIdentity(refused) {
  if (JSON.parse(localStorage.getItem(IDENTITY_KEY) || "null")?.token === refused) localStorage.removeItem(IDENTITY_KEY);
}

export async function identity() {
  const stored = JSON.parse(localStorage.getItem(IDENTITY_KEY) || "null");
  if (stored?.token && stored?.session_id) return stored;
  const response = await fetch("/api/identity", { method: "POST" });
  if (!response.ok) throw new Error("The server did not give this page an identity.");
  const fresh = await response.json();
  localStorage.setItem(IDENTITY_KEY, JSON.stringify(fresh));
  return fresh;
}

/** Words a listener understands, for the Router's and engine's error codes. */
export function explain(error) {
  const messages = {
    source_not_found: "That file is not in the media folder.",
    outside_media_dir: "Only files inside the media folder can be played.",
    unsupported_scheme: "Only http(s) links and files from the media folder can be played.",
    private_address: "That address is on a private network; the server will not fetch it.",
    unresolvable: "Nothing playable was found at that address.",
    resolver_unavailable: "Links to web pages cannot be opened right now (yt-dlp is missing on the server).",
    pool_exhausted: "The server is playing for too many people right now. Try again in a minute.",
    engine_full: "The server is playing as much as it can carry right now. Try again in a few seconds.",
    engine_unavailable: "The audio engine is not running right now. Try again in a few seconds.",
    engine_restarted: "The audio engine restarted. Press play to continue.",
    missing_url: "Type a file name, a link or something to search for first.",
    source_timeout: "That address took too long to answer, so it was given up.",
    resolver_busy: "The server is busy finding other links. Try again in a few seconds.",
    too_many_pending: "Many links of yours are still being looked up. Wait for them first.",
    identity_refused: "The server no longer knew this browser, so it was given a new session.",
    nothing_playing: "Play some music first: this plays a sound over it.",
    too_many_layers: "Four sounds are already playing over the music. Wait for one to end.",
  };
  const text = messages[error?.code] || error?.message || "Something went wrong.";
  // A link looked up after its command was answered is named, since the page has moved on.
  return error?.url ? `${error.url}: ${text}` : text;
}

export class Connection {
  constructor({ onState, onEvent, onAudio, onConnection }) {
    Object.assign(this, { onState, onEvent, onAudio, onConnection });
    this.pending = new Map();
    this.nextID = 1;
    this.backoff = 250;
  }

  async open() {
    this.me = await identity();
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(`${scheme}://${location.host}/ws?token=${encodeURIComponent(this.me.token)}`);
    socket.binaryType = "arraybuffer";
    this.socket = socket;
    this.onConnection("connecting");
    socket.onopen = () => {
      this.backoff = 250;
      this.onConnection("connected");
    };
    socket.onmessage = (message) => {
      if (typeof message.data !== "string") return this.onAudio(message.data);
      const data = JSON.parse(message.data);
      if (data.type === "state") return this.onState(data);
      if (data.type === "reply") return this.settle(data);
      this.onEvent(data);
    };
    socket.onclose = (event) => {
      if (this.socket !== socket) return;
      // 4401: the Router refused the token itself (4000 + HTTP 401). Retrying it cannot help.
      if (event.code === 4401) {
        forgetIdentity(this.me.token);
        this.backoff = 250;
        this.onEvent({ type: "error", code: "identity_refused" });
      }
      for (const [, waiter] of this.pending) waiter.reject({ code: "engine_unavailable", message: "The connection dropped." });
      this.pending.clear();
      this.onConnection("reconnecting");
      setTimeout(() => this.open().catch(() => this.onConnection("offline")), this.backoff);
      this.backoff = Math.min(this.backoff * 2, 5000);
    };
  }

  settle(reply) {
    const waiter = this.pending.get(reply.id);
    if (!waiter) return;
    this.pending.delete(reply.id);
    if (reply.ok) {
      if (reply.state) this.onState(reply.state);
      waiter.resolve(reply.state);
    } else {
      waiter.reject(reply.error);
    }
  }

  /** Runs a command (`play`, `queue`, `next`, …) and resolves with the new state. */
  async command(op, args = {}) {
    if (this.socket?.readyState === WebSocket.OPEN) {
      const id = this.nextID++;
      const answer = new Promise((resolve, reject) => this.pending.set(id, { resolve, reject }));
      this.socket.send(JSON.stringify({ op, ...args, id }));
      return answer;
    }
    const me = await identity();
    // A sound over the music has a resource of its own, and answers the layer, not the state.
    const path = op === "layer" ? "layers" : op;
    const response = await fetch(`/api/sessions/${encodeURIComponent(me.session_id)}/${path}`, {
      method: "POST",
      headers: { "Content-Type": "application/json", Authorization: `Bearer ${me.token}` },
      body: JSON.stringify(args),
    });
    const body = await response.json().catch(() => null);
    if (response.status === 401) forgetIdentity(me.token);
    if (!response.ok) throw body?.error || { code: "http_" + response.status, message: `Request failed (${response.status}).` };
    if (op !== "layer") this.onState(body);
    return body;
  }

  /** A token that hears this session and cannot control it, with its listeners' page. */
  async listenToken() {
    const me = await identity();
    const response = await fetch(`/api/sessions/${encodeURIComponent(me.session_id)}/listen-token`, {
      method: "POST",
      headers: { Authorization: `Bearer ${me.token}` },
    });
    const body = await response.json().catch(() => null);
    if (!response.ok) throw body?.error || { message: "No listen link could be made." };
    return body;
  }

  async search(query) {
    const me = await identity();
    const response = await fetch(`/api/search?q=${encodeURIComponent(query)}&limit=8`, {
      headers: { Authorization: `Bearer ${me.token}` },
    });
    const body = await response.json().catch(() => null);
    if (!response.ok) throw body?.error || { message: "Search failed." };
    return body.results || [];
  }
}
