// Copy buttons: data-copy names the element whose text goes to the clipboard.
(function () {
  "use strict";
  for (const button of document.querySelectorAll("[data-copy]")) {
    button.addEventListener("click", async () => {
      const text = document.getElementById(button.dataset.copy).textContent;
      try { await navigator.clipboard.writeText(text); button.textContent = "Copied"; }
      catch (error) { button.textContent = "Select and copy by hand"; }
    });
  }
})();
