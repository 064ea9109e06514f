// The context viewer (templates/chat/fragments.html#context_section): a meter section's link
// loads what the model was sent into the dialog (htmx), and this opens it as a modal. The
// dialog closes with Esc or its Close button, and the browser gives focus back to the link.
(function () {
  "use strict";
  document.addEventListener("htmx:afterSwap", function (evt) {
    var target = evt.detail && evt.detail.target;
    if (!target || target.id !== "context-dialog-body") return;
    var dialog = document.getElementById("context-dialog");
    if (!dialog) return;
    if (!dialog.open) dialog.showModal();
    var title = document.getElementById("context-dialog-title");
    if (title) title.focus();
  });
  // A click on the backdrop (outside the dialog's box) closes it too.
  document.addEventListener("click", function (evt) {
    var dialog = document.getElementById("context-dialog");
    if (!dialog || !dialog.open || evt.target !== dialog) return;
    var box = dialog.getBoundingClientRect();
    var inside = evt.clientX >= box.left && evt.clientX <= box.right && evt.clientY >= box.top && evt.clientY <= box.bottom;
    if (!inside) dialog.close();
  });
})();
