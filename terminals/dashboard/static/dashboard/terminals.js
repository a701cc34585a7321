// The terminals list refreshes its rows every 3 s (server-rendered and escaped), except while the keyboard is in it.
(function () {
  "use strict";
  const table = document.getElementById("terminals");
  const body = table.querySelector("tbody");
  setInterval(async () => {
    if (body.contains(document.activeElement)) return;
    const answer = await fetch(table.dataset.refresh, { credentials: "same-origin" });
    if (answer.ok) body.innerHTML = await answer.text();
  }, 3000);
})();
