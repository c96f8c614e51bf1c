// The dashboard's live refresh: fetch the figures (the live view's HTML, rendered and escaped by
// the server) every few seconds and put them in place; no page reload, no build step. Paused
// while the tab is hidden, while the keyboard's focus is among the figures (a refresh would take
// it away), and by the button; a failed fetch leaves the last figures and says so. The warning
// about workers is kept as it is while it names the same workers, so that a screen reader
// announces it when it changes, not at every refresh.
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
    if (paused || inFlight || document.hidden || region.contains(document.activeElement)) {
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
        const next = document.createElement("div");
        next.innerHTML = html;
        const shown = region.querySelector(".outbox-warnings");
        const fetched = next.querySelector(".outbox-warnings");
        if (shown && fetched && shown.dataset.workers === fetched.dataset.workers) {
          fetched.replaceWith(shown);
        }
        region.replaceChildren(...next.childNodes);
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
