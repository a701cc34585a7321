// A terminal's page: xterm.js attached to the service's WebSocket (docs/live.md). Output is written only into the
// emulator. On a dropped connection it reconnects from the next byte it needs (fromByte), so nothing is lost or
// shown twice; a gap the service announces is shown as such. Input, sizes and signals go back unless read-only.
(function () {
  "use strict";
  const element = document.getElementById("terminal");
  const state = document.getElementById("state");
  const viewers = document.getElementById("viewers");
  const id = element.dataset.id;
  const readOnly = element.dataset.mode === "view";
  const ACK_EVERY = 256 * 1024;

  const term = new Terminal({ scrollback: 100000, cursorBlink: !readOnly, disableStdin: readOnly,
                              fontFamily: "ui-monospace, Menlo, Consolas, monospace", fontSize: 14 });
  const fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(element);
  fit.fit();
  window.dashboardTerminal = term;  // the browser tests read the emulator's buffer through this

  let socket = null;
  let nextByte = null;  // the next byte this page needs; null until the first frame says where output starts
  let acked = 0;
  let ended = false;
  let retry = 500;

  function show(text) { state.textContent = text; }

  function send(frame) {
    if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify(frame));
  }

  function connect() {
    const query = new URLSearchParams();
    if (readOnly) query.set("mode", "view");
    if (nextByte !== null) query.set("fromByte", String(nextByte));
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    socket = new WebSocket(`${scheme}://${location.host}/ws/terminals/${id}/?${query}`);
    window.dashboardSocket = socket;  // and drop the connection through this
    socket.onmessage = (event) => receive(JSON.parse(event.data));
    socket.onclose = () => {
      if (ended) return;
      show(`connection lost; reconnecting from byte ${nextByte ?? 0}…`);
      setTimeout(connect, retry);
      retry = Math.min(retry * 2, 5000);
    };
  }

  function receive(frame) {
    switch (frame.type) {
      case "attached":
        retry = 500;
        if (nextByte === null) nextByte = frame.fromByte;
        acked = nextByte;
        if (viewers) viewers.textContent = String(frame.viewers);
        show(frame.isActive ? (readOnly ? "live, read-only" : "live") : "ended");
        if (!readOnly && frame.isActive) send({ type: "resize", cols: term.cols, rows: term.rows });
        break;
      case "output":
        if (frame.next <= nextByte) break;  // already shown (cannot happen when resuming at fromByte)
        term.write(frame.data);
        nextByte = frame.next;
        if (nextByte - acked >= ACK_EVERY) { acked = nextByte; send({ type: "ack", offset: nextByte }); }
        break;
      case "gap":
        term.write(`\r\n\x1b[7m[${frame.to - frame.from} bytes were dropped by the service before this page got them]\x1b[0m\r\n`);
        nextByte = frame.to;
        break;
      case "paused":
        acked = frame.offset;
        send({ type: "ack", offset: frame.offset });
        break;
      case "exit":
        ended = true;
        send({ type: "ack", offset: frame.offset });
        show(frame.signal ? `ended by ${frame.signal}` : `ended with exit code ${frame.exitCode}`);
        document.getElementById("status").textContent = "ended";
        break;
      case "error":
        show(`${frame.code}: ${frame.message}`);
        break;
    }
  }

  if (!readOnly) {
    term.onData((data) => send({ type: "input", data: data }));
    term.onResize(({ cols, rows }) => send({ type: "resize", cols: cols, rows: rows }));
    for (const button of document.querySelectorAll("[data-signal]")) {
      button.addEventListener("click", () => { send({ type: "signal", signal: button.dataset.signal }); term.focus(); });
    }
  }
  window.addEventListener("resize", () => fit.fit());
  connect();
  term.focus();

  // The commands the shell ran and who watches: fragments rendered (and escaped) by the server, every 3 s.
  async function refresh(target, url) {
    if (!target) return;
    const answer = await fetch(url, { credentials: "same-origin" });
    if (answer.ok) target.innerHTML = await answer.text();
  }
  const commands = document.getElementById("commands");
  const watchers = document.getElementById("watchers");
  function refreshAll() {
    if (element.dataset.guest === "true") return;  // a shared look gets the live view alone
    refresh(commands, element.dataset.commands);
    refresh(watchers, element.dataset.watchers).then(() => {
      if (viewers && watchers) viewers.textContent = String(watchers.children.length);
    });
  }
  refreshAll();
  setInterval(refreshAll, 3000);
})();
