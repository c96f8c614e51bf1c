// The dashboard's live refresh: fetch the figures (the live view's HTML, rendered and escaped by
// the server) every few seconds and put them in place; no page reload, no build step. Paused
// while the tab is hidden, and by the button; a failed fetch leaves the last figures and says so.
"use strict";
(function () {
  const region = document.getElementById("outbox-live");
  const status = document.getElementById("outbox-refresh-status");
  const toggle = document.getElementById("outbox-refresh-toggle");
  if (!region || !status || !toggle) {
    return;
  }
  const seconds = Number(region.dataset.refreshSeconds) || 10;
  let paused = false;
  let inFlight = false;
  toggle.hidden = false;

  function asOf() {
    const note = document.getElementById("outbox-as-of");
    return note ? note.dataset.asOf : "";
  }

  function refresh() {
    if (paused || inFlight || document.hidden) {
      return;
    }
    inFlight = true;
    fetch(region.dataset.refreshUrl, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (!response.ok) {
          throw new Error(String(response.status));
        }
        return response.text();
      })
      .then(function (html) {
        region.innerHTML = html;
        status.textContent = region.dataset.textUpdated + " " + asOf() + " UTC.";
      })
      .catch(function () {
        status.textContent = region.dataset.textFailed + " " + asOf() + " UTC.";
      })
      .finally(function () {
        inFlight = false;
      });
  }

  toggle.addEventListener("click", function () {
    paused = !paused;
    toggle.setAttribute("aria-pressed", String(paused));
    toggle.textContent = paused ? region.dataset.textResume : region.dataset.textPause;
    if (!paused) {
      refresh();
    }
  });
  window.setInterval(refresh, seconds * 1000);
})();
