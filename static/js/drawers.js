// Drawers on narrow screens: the site menu, and on the chat page the conversation list and the
// context meter. A toggle button ([data-drawer-toggle], aria-controls naming the drawer) opens
// its drawer ([data-drawer]); Esc, the drawer's close button ([data-drawer-close]), a tap on the
// shade beside it or the focus moving elsewhere close it. Opening moves the focus into the drawer,
// closing by Esc or the close button brings it back to the toggle. Whether a drawer is a drawer
// at all is the stylesheet's call: on a wide screen the toggles are not shown and the same
// elements are columns or a plain nav.
//
// Loaded in <head> without defer, so the class below is set before the first paint: without
// JavaScript the drawers stay ordinary parts of the page (nothing is out of reach).
(function () {
  "use strict";

  document.documentElement.classList.add("has-drawers");

  var FOCUSABLE = "a[href], button:not([disabled]), input:not([disabled]):not([type=hidden]), select:not([disabled]), " +
    "textarea:not([disabled]), summary, [tabindex]:not([tabindex='-1'])";
  var open = null;  // {drawer, toggle}

  function shade() {
    var el = document.getElementById("drawer-shade");
    if (!el) {
      el = document.createElement("div");
      el.id = "drawer-shade";
      el.className = "drawer-shade";
      document.body.appendChild(el);
    }
    return el;
  }

  function shown(el) { return !!el && el.getClientRects().length > 0; }

  function openDrawer(toggle, drawer) {
    if (open) closeDrawer(false);
    drawer.classList.add("is-open");
    toggle.setAttribute("aria-expanded", "true");
    document.documentElement.classList.add("drawer-is-open");
    shade().dataset.for = drawer.id;
    open = { drawer: drawer, toggle: toggle };
    var first = Array.prototype.find.call(drawer.querySelectorAll(FOCUSABLE), shown);
    (first || drawer).focus();
  }

  function closeDrawer(refocus) {
    if (!open) return;
    var current = open;
    open = null;
    current.drawer.classList.remove("is-open");
    current.toggle.setAttribute("aria-expanded", "false");
    document.documentElement.classList.remove("drawer-is-open");
    if (refocus && shown(current.toggle)) current.toggle.focus();
  }

  document.addEventListener("click", function (evt) {
    var target = evt.target && evt.target.closest ? evt.target : null;
    if (!target) return;
    var toggle = target.closest("[data-drawer-toggle]");
    if (toggle) {
      var drawer = document.getElementById(toggle.getAttribute("aria-controls"));
      if (!drawer) return;
      if (open && open.drawer === drawer) closeDrawer(true);
      else openDrawer(toggle, drawer);
      return;
    }
    if (!open) return;
    if (target.closest("[data-drawer-close]") || target.id === "drawer-shade") {
      closeDrawer(true);
    }
  });

  // Esc closes the open drawer first; other Esc handlers can tell by defaultPrevented.
  document.addEventListener("keydown", function (evt) {
    if (evt.key !== "Escape" || !open || evt.defaultPrevented) return;
    evt.preventDefault();
    closeDrawer(true);
  });

  // Tabbing (or a screen reader's cursor) out of the drawer closes it, so what is focused is
  // never behind the shade. A click on the shade moves the focus nowhere (relatedTarget null).
  document.addEventListener("focusout", function (evt) {
    if (!open || !evt.relatedTarget) return;
    var next = evt.relatedTarget;
    if (open.drawer.contains(next) || open.toggle.contains(next)) return;
    if (open.drawer.contains(evt.target)) closeDrawer(false);
  });

  // Widened past the drawers' breakpoint: the toggle is gone, so is the open state.
  window.addEventListener("resize", function () {
    if (open && !shown(open.toggle)) closeDrawer(false);
  });
})();
