// heartq dashboard: the little the pages need beyond htmx, with no inline script
// (the Content-Security-Policy allows none).
// - A form with data-confirm asks before it posts.
// - The live region is neither re-read nor replaced while the user is choosing (a field
//   focused, or a box, option or field not as the page came: ticked, chosen, typed in),
//   so a refresh, asked for then or already on its way, never undoes what they did.
document.addEventListener("submit", function (event) {
  var message = event.target.getAttribute("data-confirm");
  if (message && !window.confirm(message)) {
    event.preventDefault();
  }
});

// The field is not as the page came: a box ticked or unticked, an option chosen, text
// typed (focus may have moved on since: to a button pressed, or anywhere else).
function fieldChanged(field) {
  if (field.type === "checkbox" || field.type === "radio") {
    return field.checked !== field.defaultChecked;
  }
  if (field.tagName === "SELECT") {
    return Array.prototype.some.call(field.options, function (option) {
      return option.selected !== option.defaultSelected;
    });
  }
  return field.value !== field.defaultValue;
}

// Whether the event is about the live region and the user is choosing in it.
function liveRegionBusy(event) {
  var live = event.detail.elt;
  if (!live || live.id !== "live") {
    return false;
  }
  var focused = document.activeElement;
  if (focused && live.contains(focused) && focused.matches("input, select, textarea")) {
    return true;
  }
  return Array.prototype.some.call(live.querySelectorAll("input, select, textarea"), fieldChanged);
}

document.addEventListener("htmx:beforeRequest", function (event) {
  if (liveRegionBusy(event)) {
    event.preventDefault();  // not re-read ...
  }
});
document.addEventListener("htmx:beforeSwap", function (event) {
  if (liveRegionBusy(event)) {
    event.detail.shouldSwap = false;  // ... nor replaced by a refresh sent before
  }
});
