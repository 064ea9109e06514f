// The chat page's few behaviours htmx does not give: Enter to send, auto-scroll, the meter's
// animation, the connection banner, and a re-sync after a reconnect. Everything else (sending
// the form, swapping fragments) is the htmx ws extension.
(function () {
  "use strict";

  var chat = document.getElementById("chat");
  if (!chat) return;
  var opened = false;
  var stickToBottom = true;
  var oldWidths = {};

  function messages() { return document.getElementById("messages"); }

  function nearBottom(el) { return el.scrollHeight - el.scrollTop - el.clientHeight < 80; }

  function scrollDown() {
    var list = messages();
    if (list) list.scrollTop = list.scrollHeight;
  }

  function banner(text, kind) {
    var el = document.getElementById("connection");
    if (!el) return;
    el.textContent = text || "";
    el.className = "connection" + (kind ? " is-" + kind : "");
    el.hidden = !text;
  }

  // Enter sends, Shift+Enter makes a new line.
  document.addEventListener("keydown", function (evt) {
    var target = evt.target;
    if (target && target.id === "composer-text" && evt.key === "Enter" && !evt.shiftKey && !evt.isComposing) {
      evt.preventDefault();
      if (target.value.trim()) target.form.requestSubmit();
    }
  });

  // The meter's fragments carry sizes as data-width / data-left: the Content-Security-Policy
  // refuses inline style attributes, but styles set from this (same-origin) script are allowed.
  function placeMeter() {
    document.querySelectorAll("#meter-bar [data-left]").forEach(function (el) { el.style.left = el.dataset.left; });
    document.querySelectorAll("#meter-bar .seg[data-width]").forEach(function (seg) {
      if (!seg.style.width) seg.style.width = seg.dataset.width;
    });
  }

  chat.addEventListener("htmx:wsBeforeMessage", function () {
    var list = messages();
    stickToBottom = !list || nearBottom(list);
    oldWidths = {};
    document.querySelectorAll("#meter-bar .seg").forEach(function (seg) { oldWidths[seg.id] = seg.style.width; });
  });

  chat.addEventListener("htmx:wsAfterMessage", function () {
    if (stickToBottom) scrollDown();
    // Grow each bar segment from its previous width to the new one (CSS transitions width).
    document.querySelectorAll("#meter-bar .seg[data-width]").forEach(function (seg) {
      var before = oldWidths[seg.id];
      var after = seg.dataset.width;
      if (seg.style.width === after) return;
      if (!before || before === after) { seg.style.width = after; return; }
      seg.style.transition = "none";
      seg.style.width = before;
      void seg.offsetWidth;
      seg.style.transition = "";
      seg.style.width = after;
    });
    placeMeter();
    var text = document.getElementById("composer-text");
    if (text && !text.closest("fieldset").disabled && document.activeElement === document.body) text.focus();
  });

  chat.addEventListener("htmx:wsOpen", function (evt) {
    banner("");
    if (opened) {
      // Reconnected: the server re-renders the conversation (a turn may have ended meanwhile).
      evt.detail.socketWrapper.send(JSON.stringify({ action: "sync" }));
    }
    opened = true;
    chat.classList.add("is-connected");
  });

  chat.addEventListener("htmx:wsClose", function (evt) {
    chat.classList.remove("is-connected");
    var code = evt.detail && evt.detail.event ? evt.detail.event.code : 0;
    if (code === 4401) banner("You are signed out. Reload the page to sign in again.", "error");
    else if (code === 4404) banner("This conversation no longer exists.", "error");
    else if (code === 1000 || code === 1001) banner("");
    else banner("Connection lost. Reconnecting…", "warn");
  });

  document.addEventListener("DOMContentLoaded", function () { placeMeter(); scrollDown(); });
  if (document.readyState !== "loading") { placeMeter(); scrollDown(); }
})();
