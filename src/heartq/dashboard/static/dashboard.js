// heartq dashboard: the little the pages need beyond htmx, with no inline script
// (the Content-Security-Policy allows none).
// - A form with data-confirm asks before it posts.
// - The live region is not re-read while the user is choosing (a box ticked, a field
//   focused), so a refresh never undoes what they were doing.
document.addEventListener("submit", function (event) {
  var message = event.target.getAttribute("data-confirm");
  if (message && !window.confirm(message)) {
    event.preventDefault();
  }
});
document.addEventListener("htmx:beforeRequest", function (event) {
  var live = event.detail.elt;
  if (live.id !== "live") {
    return;
  }
  var busy = live.querySelector("input[type=checkbox]:checked") ||
    (document.activeElement && live.contains(document.activeElement) &&
     document.activeElement.matches("input, select, textarea"));
  if (busy) {
    event.preventDefault();
  }
});
