// The chat page's few behaviours htmx does not give: Enter to send, Esc to stop, the message
// box keeping focus and what is typed in it across the server's swaps, auto-scroll, the meter's
// animation, the connection banner, a re-sync after a reconnect, and telling the server while the
// user types. Everything else (sending the form, swapping fragments) is the htmx ws extension.
(function () {
  "use strict";

  var chat = document.getElementById("chat");
  if (!chat) return;
  var opened = false;
  var oldWidths = {};

  function messages() { return document.getElementById("messages"); }

  function nearBottom(el) { return el.scrollHeight - el.scrollTop - el.clientHeight < 80; }

  // Following the stream is the reader's choice, not a sample of the scroll position taken
  // at each frame: a frame that grows the list by a screen or more (a long message) must not
  // be mistaken for the reader having scrolled up. Only a scroll that moves the list up from
  // where this script last put it stops the following; scrolling back to the bottom resumes it.
  // The list scrolls instantly (no smooth behaviour): an animated scroll is still short of the
  // bottom when the next frame lands.
  var follow = { on: true, list: null, autoTop: 0, savedTop: 0 };

  function scrollDown() {
    var list = messages();
    if (!list) return;
    list.scrollTop = list.scrollHeight;
    follow.on = true;
    follow.list = list;
    follow.autoTop = list.scrollTop;
  }

  document.addEventListener("scroll", function (evt) {
    var list = messages();
    if (!list || evt.target !== list) return;
    if (nearBottom(list)) follow.on = true;
    else if (list !== follow.list || list.scrollTop < follow.autoTop - 2) follow.on = false;
    follow.list = list;
    follow.autoTop = list.scrollTop;
    follow.savedTop = list.scrollTop;
  }, true);

  function banner(text, kind) {
    var el = document.getElementById("connection");
    if (!el) return;
    el.textContent = text || "";
    el.className = "connection" + (kind ? " is-" + kind : "");
    el.hidden = !text;
  }

  // The composer states its limit and counts as one types (in characters, as the server
  // counts them: code points). Over the limit, the text stays whole in the box and Send is
  // refused with the reason, instead of the box silently cutting a paste.
  function characters(text) { return Array.from(text).length; }

  function countComposer() {
    var text = document.getElementById("composer-text");
    var count = document.getElementById("composer-count");
    if (!text || !count) return;
    var limit = parseInt(text.dataset.maxChars || "0", 10);
    var n = characters(text.value);
    var over = limit > 0 && n > limit;
    var max = limit.toLocaleString("en-US");
    count.textContent = !n ? "Up to " + max + " characters per message." :
      n.toLocaleString("en-US") + " of " + max + " characters" +
      (over ? ": " + (n - limit).toLocaleString("en-US") + " too many. Shorten the message or send it in parts." : ".");
    count.classList.toggle("is-over", over);
    text.setCustomValidity(over ? "This message has " + n.toLocaleString("en-US") + " characters; the limit is " + limit.toLocaleString("en-US") + "." : "");
    text.setAttribute("aria-invalid", over ? "true" : "false");
  }

  document.addEventListener("input", function (evt) { if (evt.target && evt.target.id === "composer-text") countComposer(); });

  // While the user types, the server hears so (at most every 2 s): memory work running in the
  // background on a local model gives the model up now, not when the message arrives.
  var typing = { socket: null, at: 0 };
  document.addEventListener("input", function (evt) {
    if (!evt.target || evt.target.id !== "composer-text" || !evt.target.value || !typing.socket) return;
    var now = Date.now();
    if (now - typing.at < 2000) return;
    typing.at = now;
    typing.socket.send(JSON.stringify({ action: "typing" }));
  });

  // A message the server refused before storing anything of it (a reply still being written,
  // a message the model's window cannot hold) comes back as #composer-draft. Its text goes back
  // into the composer as soon as the composer is open and empty: a refusal that arrives while
  // the box still shows the text, or while a reply keeps it shut, waits for that. Of two
  // refusals in one burst (a message refused by the runtime after the next one was refused as
  // busy), the one of the message sent last is kept; sending anything, or editing the box,
  // drops a pending one: the writer has moved on.
  var draft = { pending: null, lastSent: null };

  function takeDraft() {
    var el = document.getElementById("composer-draft");
    if (!el || !el.hasAttribute("data-text")) return;
    var text = el.getAttribute("data-text");
    el.removeAttribute("data-text");
    if (draft.pending === null || text === draft.lastSent) draft.pending = text;
  }

  function restoreDraft() {
    var text = document.getElementById("composer-text");
    if (draft.pending === null || !text || text.closest("fieldset").disabled || text.value) return;
    text.value = draft.pending;
    draft.pending = null;
  }

  chat.addEventListener("htmx:wsConfigSend", function (evt) {
    if (!evt.target || evt.target.id !== "composer-form") return;
    draft.pending = null;
    draft.lastSent = evt.detail.parameters.message;
    // The box empties as the message goes (its values are taken already); a message the server
    // refuses comes back as a draft (above). What is typed next stays, across the swaps below.
    var text = document.getElementById("composer-text");
    if (text) { text.value = ""; countComposer(); }
    editing(null);
  });

  // "Edit your last message" puts its text in the box; sending it then replaces that message
  // and its reply (the form's hidden "replace" field names it). Cancel, or sending, ends it.
  function editing(id, text) {
    var replace = document.getElementById("composer-replace");
    var note = document.getElementById("composer-editing");
    var area = document.getElementById("composer-text");
    if (replace) replace.value = id || "";
    if (note) note.hidden = !id;
    if (area && id && text !== undefined) {
      area.value = text;
      countComposer();
      area.focus();
      area.setSelectionRange(area.value.length, area.value.length);
    }
  }

  document.addEventListener("click", function (evt) {
    var edit = evt.target && evt.target.closest ? evt.target.closest("[data-edit]") : null;
    if (edit) { evt.preventDefault(); editing(edit.dataset.edit, edit.dataset.text); return; }
    if (evt.target && evt.target.id === "cancel-edit") {
      evt.preventDefault();
      var area = document.getElementById("composer-text");
      if (area) { area.value = ""; countComposer(); area.focus(); }
      editing(null);
    }
  });

  // The server replaces the composer when a reply starts and ends (its state, Send and Stop).
  // The message box keeps what is typed in it meanwhile, and the focus: a box, Send or Stop
  // that had it hands it to the new box (a reply starting right after Enter, a Stop pressed).
  var box = { focused: false, value: "", start: 0, end: 0, replace: "" };

  function composerRunning() { return !!document.querySelector('#composer[data-state="running"]'); }
  document.addEventListener("input", function (evt) { if (evt.target && evt.target.id === "composer-text") draft.pending = null; });

  // The offline notice can be dismissed; it stays dismissed in this browser.
  function dismissed(id) { try { return localStorage.getItem("modex.dismissed." + id) === "1"; } catch (e) { return false; } }
  document.addEventListener("click", function (evt) {
    var button = evt.target && evt.target.closest ? evt.target.closest("[data-dismiss]") : null;
    if (!button) return;
    var id = button.dataset.dismiss;
    var el = document.getElementById(id);
    if (el) el.hidden = true;
    try { localStorage.setItem("modex.dismissed." + id, "1"); } catch (e) { /* private mode: this page only */ }
    var text = document.getElementById("composer-text");
    if (text) text.focus();
  });
  document.querySelectorAll("[data-dismiss]").forEach(function (button) {
    var el = document.getElementById(button.dataset.dismiss);
    if (el && dismissed(button.dataset.dismiss)) el.hidden = true;
  });

  // Enter sends, Shift+Enter makes a new line; while a reply is written Enter keeps the text
  // (Send is shut) and Esc, anywhere on the page, stops the reply, unless it closes something
  // first: an open drawer (drawers.js marks the event) or the context viewer's dialog.
  document.addEventListener("keydown", function (evt) {
    var target = evt.target;
    if (evt.key === "Escape" && (evt.defaultPrevented || document.querySelector("dialog[open]"))) return;
    if (evt.key === "Escape" && !evt.isComposing && composerRunning()) {
      var stop = document.getElementById("stop-form");
      var button = stop && stop.querySelector("button.stop");
      if (button && !button.disabled) {
        evt.preventDefault();
        stop.requestSubmit(button);
      }
      return;
    }
    if (target && target.id === "composer-text" && evt.key === "Enter" && !evt.shiftKey && !evt.isComposing) {
      evt.preventDefault();
      if (composerRunning()) return;
      countComposer();
      if (target.value.trim() && !target.form.reportValidity()) return;
      if (target.value.trim()) target.form.requestSubmit();
    }
  });

  // The meter's segments carry their widths as data-width: the Content-Security-Policy refuses
  // inline style attributes, but styles set from this (same-origin) script are allowed.
  function placeMeter() {
    document.querySelectorAll("#meter-bar .seg[data-width]").forEach(function (seg) {
      if (!seg.style.width) seg.style.width = seg.dataset.width;
    });
  }

  chat.addEventListener("htmx:wsBeforeMessage", function () {
    var list = messages();
    if (list) follow.savedTop = list.scrollTop;
    var composer = document.getElementById("composer");
    var text = document.getElementById("composer-text");
    box.focused = !!(composer && composer.contains(document.activeElement));
    box.value = text ? text.value : "";
    box.start = text ? text.selectionStart : 0;
    box.end = text ? text.selectionEnd : 0;
    var replace = document.getElementById("composer-replace");
    box.replace = replace ? replace.value : "";
    oldWidths = {};
    document.querySelectorAll("#meter-bar .seg").forEach(function (seg) { oldWidths[seg.id] = seg.style.width; });
  });

  // "Load earlier messages" is an htmx request into the list. A re-sync (every connect sends
  // one) replaces the list: a request still on its way then has nowhere to land (its button is
  // gone), so it is asked again from the new list's button.
  var earlierSource = null;
  document.addEventListener("htmx:beforeRequest", function (evt) {
    if (evt.target && evt.target.closest && evt.target.closest("#load-earlier")) earlierSource = evt.target;
  });
  document.addEventListener("htmx:afterRequest", function (evt) { if (evt.target === earlierSource) earlierSource = null; });

  function retryEarlier() {
    if (!earlierSource || document.body.contains(earlierSource)) return;
    earlierSource = null;
    var button = document.querySelector("#load-earlier button");
    if (button && window.htmx) window.htmx.trigger(button, "click");
  }

  chat.addEventListener("htmx:wsAfterMessage", function () {
    retryEarlier();
    var list = messages();
    if (follow.on) scrollDown();
    else if (list && list !== follow.list) {
      // The list was re-rendered (a stop, a re-sync) while the reader was scrolled up: keep
      // their place instead of the new list's top.
      list.scrollTop = follow.savedTop;
      follow.list = list;
      follow.autoTop = list.scrollTop;
    }
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
    if (text && box.value && !text.value) {  // the composer was swapped: what was typed stays
      text.value = box.value;
      text.setSelectionRange(box.start, box.end);
      var replace = document.getElementById("composer-replace");
      if (box.replace && replace && !replace.value) editing(box.replace);
    }
    takeDraft();
    restoreDraft();
    countComposer();
    var composer = document.getElementById("composer");
    var lost = document.activeElement === document.body || (box.focused && !(composer && composer.contains(document.activeElement)));
    if (text && !text.closest("fieldset").disabled && lost) text.focus();
  });

  chat.addEventListener("htmx:wsOpen", function (evt) {
    banner("");
    // The server re-renders the conversation on every (re)connect: a turn may have ended
    // between this page's render and its socket (a reload mid-reply), or while it was offline.
    evt.detail.socketWrapper.send(JSON.stringify({ action: "sync" }));
    typing.socket = evt.detail.socketWrapper;
    opened = true;
    chat.classList.add("is-connected");
  });

  chat.addEventListener("htmx:wsClose", function (evt) {
    chat.classList.remove("is-connected");
    typing.socket = null;
    var code = evt.detail && evt.detail.event ? evt.detail.event.code : 0;
    if (code === 4401) banner("You are signed out. Reload the page to sign in again.", "error");
    else if (code === 4404) banner("This conversation no longer exists.", "error");
    else if (code === 4429) banner("Too many chat tabs are open; close one, then reload this page.", "error");
    else if (code === 1000 || code === 1001) banner("");
    else banner("Connection lost. Reconnecting…", "warn");
  });

  function ready() {
    placeMeter();
    scrollDown();
    countComposer();
    var text = document.getElementById("composer-text");
    if (text && !text.closest("fieldset").disabled) text.focus();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", ready);
  else ready();
})();
