// The scope editor's one behaviour htmx does not give. A file, not an inline script: the
// Content-Security-Policy allows scripts from /static/ only.
/* Core memory needs the archive: greying it out here; the server validates anyway. */
document.addEventListener("change", function (event) {
  var box = event.target;
  if (!box.matches || !box.matches('input[data-layer="archive"]')) return;
  var form = box.form;
  if (!form) return;
  var core = form.querySelector('input[data-layer="core"][data-agent="' + CSS.escape(box.dataset.agent) + '"]');
  if (!core) return;
  core.disabled = !box.checked;
  if (!box.checked) core.checked = false;
  core.closest(".switch").classList.toggle("is-disabled", !box.checked);
});
