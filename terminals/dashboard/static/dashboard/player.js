// Recordings (asciicast v2) played with the vendored asciinema-player. No inline script is allowed, so every element
// with data-recording-src gets a player here; data-idle-time-limit and data-speed tune it. The player fetches the
// file itself (same origin, with the session cookie), and its terminal emulator is WebAssembly, hence the pages that
// load this script send PLAYER_POLICY (security.py), not POLICY.
(function () {
  "use strict";

  function number(value, fallback) {
    const parsed = Number.parseFloat(value);
    return Number.isFinite(parsed) && parsed > 0 ? parsed : fallback;
  }

  function fail(element, error) {
    element.player = null;
    element.classList.add("recording-failed");
    element.textContent = `The recording could not be played: ${error && error.message ? error.message : error}`;
  }

  for (const element of document.querySelectorAll("[data-recording-src]")) {
    let player;
    try {
      player = AsciinemaPlayer.create(element.dataset.recordingSrc, element, {
        controls: true,
        idleTimeLimit: number(element.dataset.idleTimeLimit, 2),
        speed: number(element.dataset.speed, 1),
        fit: "width",
        preload: true,  // fetch and parse now: a missing or broken file is reported at once, not on the first click
        // Local fonts only (font-src 'self' and no network): the same stack as the live terminal.
        terminalFontFamily: "ui-monospace, Menlo, Consolas, \"DejaVu Sans Mono\", monospace",
      });
    } catch (error) {
      fail(element, error);
      continue;
    }
    // A failed fetch or parse comes back as the core's "error" event (not in the package's types, but dispatched);
    // the player itself would only show a blank error overlay, so it is taken down and the reason shown instead.
    player.addEventListener("error", (error) => { player.dispose(); fail(element, error); });
    element.player = player;  // the browser tests drive playback through this (play, seek, getCurrentTime)
  }
})();
