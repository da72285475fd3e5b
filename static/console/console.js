/* Keelgate console: the live inbox's glue to htmx, keyboard shortcuts, small niceties.
 *
 * The server sends HTML over the websocket (htmx ws extension, out-of-band swaps). An
 * update for an inbox list carries `data-upsert`: each child is an item in its current
 * state, or a `data-gone` placeholder for an item someone settled. This script puts
 * each in place: replace an item already shown (keeping what the operator is typing),
 * drop a settled one, and let htmx insert the rest at the top (newest first).
 * Nothing here builds HTML from strings: text goes through textContent.
 */
(function () {
  "use strict";

  var FLASH_KEEP = 4;
  /* How long a message stays, by its level: long enough to read, then out of the way.
     Every message also leaves at the person's next action (a request htmx sends). */
  var FLASH_SECONDS = { success: 6, info: 8, warning: 12, error: 15 };

  /* Reconnect soon: the extension's default backoff grows to a random wait of up to 64 s,
     far too long for an operator whose decisions are paused meanwhile. Here: 0.5 to 1 s
     at first, doubling to at most 4 to 8 s, jittered so a restarted server is not stormed. */
  if (window.htmx) {
    window.htmx.config.wsReconnectDelay = function (retry) {
      var ceiling = 1000 * Math.pow(2, Math.min(retry, 3));
      return ceiling / 2 + Math.random() * ceiling / 2;
    };
  }

  function $(id) { return document.getElementById(id); }

  function flash(level, text) {
    var area = $("flash");
    if (!area) return;
    var p = document.createElement("p");
    p.className = "flash " + level;
    p.textContent = text;
    area.insertBefore(p, area.firstChild);
    pruneFlashes();
  }

  function pruneFlashes() {
    var area = $("flash");
    while (area && area.children.length > FLASH_KEEP) area.removeChild(area.lastElementChild);
    if (area) Array.prototype.forEach.call(area.children, timeFlash);
  }

  function timeFlash(p) {
    if (p.hasAttribute("data-timed")) return;
    p.setAttribute("data-timed", "");
    var level = ["error", "warning", "info", "success"].filter(function (l) { return p.classList.contains(l); })[0];
    setTimeout(function () { dismissFlash(p); }, 1000 * (FLASH_SECONDS[level] || 8));
  }

  function dismissFlash(p) {
    if (!p.parentNode || p.classList.contains("leaving")) return;
    p.classList.add("leaving");  /* fades out (console.css), then goes */
    setTimeout(function () { if (p.parentNode) p.parentNode.removeChild(p); }, 300);
  }

  function clearFlashes() {
    var area = $("flash");
    if (area) Array.prototype.slice.call(area.children).forEach(dismissFlash);
  }

  function setLive(state, text) {
    var live = $("live");
    if (!live) return;
    live.setAttribute("data-state", state);
    live.textContent = text || state;
  }

  function items() { return Array.prototype.slice.call(document.querySelectorAll("[data-item]")); }

  function current() {
    var active = document.activeElement;
    var inItem = active && active.closest ? active.closest("[data-item]") : null;
    return inItem || document.querySelector("[data-item].selected");
  }

  function select(item) {
    if (!item) return;
    items().forEach(function (el) { el.classList.remove("selected"); el.removeAttribute("aria-current"); });
    item.classList.add("selected");
    item.setAttribute("aria-current", "true");
    item.focus({ preventScroll: true });
    item.scrollIntoView({ block: "nearest" });
  }

  /* Carry typed text (inputs, text areas, choices) and focus from an item's old forms to its new ones. */
  function carryOver(oldItem, newItem) {
    var focused = document.activeElement;
    var refocus = null;
    oldItem.querySelectorAll("form").forEach(function (form) {
      var kind = form.classList[0];
      var twinForm = kind ? newItem.querySelector("form." + CSS.escape(kind)) : null;
      if (!twinForm) return;
      form.querySelectorAll("input[name]:not([type=hidden]), textarea[name], select[name]").forEach(function (field) {
        var byName = '[name="' + CSS.escape(field.name) + '"]';
        if (field.type === "radio" || field.type === "checkbox") {
          var twin = twinForm.querySelector(byName + '[value="' + CSS.escape(field.value) + '"]');
          if (twin) twin.checked = field.checked;
          if (twin && field === focused) refocus = twin;
        } else {
          var match = twinForm.querySelector(byName);
          if (match && field.value) match.value = field.value;
          if (match && field === focused) refocus = match;
        }
      });
    });
    var wasSelected = oldItem.classList.contains("selected");
    return function restore() {
      if (wasSelected) { newItem.classList.add("selected"); newItem.setAttribute("aria-current", "true"); }
      if (refocus) refocus.focus({ preventScroll: true });
    };
  }

  function removeItem(item, note) {
    var list = items();
    var index = list.indexOf(item);
    var hadFocus = item.contains(document.activeElement) || item.classList.contains("selected");
    if (note && typedIn(item)) { keepSettled(item, note); return; }
    item.remove();
    if (note) flash("info", "Settled elsewhere: " + note + ".");
    if (hadFocus) {
      var rest = items();
      select(rest[Math.min(index, rest.length - 1)]);
    }
  }

  /* Something typed into one of the item's text boxes (a reason, a note, an edit). */
  function typedIn(item) {
    return Array.prototype.some.call(item.querySelectorAll("input[type=text], input[type=number], input:not([type]), textarea"),
      function (field) { return field.value.trim() !== "" && field.value !== field.defaultValue; });
  }

  /* Someone else settled the item while this person typed: keep the card and the text,
     say what happened, and take away the buttons (nothing of theirs can apply now). */
  function keepSettled(item, note) {
    item.classList.add("settled");
    item.removeAttribute("data-item");
    item.querySelectorAll("button[type=submit], input[type=checkbox]").forEach(function (b) { b.disabled = true; });
    var notice = document.createElement("div");
    notice.className = "settled-note";
    notice.setAttribute("role", "alert");
    var text = document.createElement("p");
    text.textContent = "Settled elsewhere: " + note + ". Nothing of yours was applied; what you typed is kept below.";
    var dismiss = document.createElement("button");
    dismiss.type = "button";
    dismiss.textContent = "Dismiss";
    dismiss.addEventListener("click", function () { item.remove(); });
    notice.appendChild(text);
    notice.appendChild(dismiss);
    item.insertBefore(notice, item.firstChild);
  }

  /* A new item goes where the queue order puts it (data-sort compares as text); one that
     belongs on another page of this list is left to that page. */
  function place(list, node) {
    var key = node.getAttribute("data-sort") || "";
    var cards = Array.prototype.slice.call(list.querySelectorAll(":scope > [data-sort]"));
    var before = null;
    for (var i = 0; i < cards.length; i++) {
      if ((cards[i].getAttribute("data-sort") || "") > key) { before = cards[i]; break; }
    }
    if (before === null && cards.length && list.hasAttribute("data-has-next")) return false;
    if (before === cards[0] && cards.length && !list.hasAttribute("data-first")) return false;
    list.insertBefore(node, before);
    if (window.htmx) window.htmx.process(node);
    if (offline) disableDecisions(node, true);
    return true;
  }

  document.addEventListener("htmx:oobBeforeSwap", function (evt) {
    var fragment = evt.detail.fragment;
    if (!fragment || !fragment.hasAttribute || !fragment.hasAttribute("data-upsert")) return;
    var list = evt.detail.target;
    Array.prototype.slice.call(fragment.children).forEach(function (node) {
      var old = node.id ? $(node.id) : null;
      if (old && old.classList.contains("settled")) {
        /* Kept with what was typed (keepSettled): the run's later events each say again
           that it is settled; the card stays as it is until its Dismiss. */
        node.remove();
      } else if (node.hasAttribute("data-gone")) {
        if (old) removeItem(old, node.getAttribute("data-gone"));
        node.remove();
      } else if (old) {
        var restore = carryOver(old, node);
        old.replaceWith(node);
        if (window.htmx) window.htmx.process(node);
        if (offline) disableDecisions(node, true);
        restore();
      } else {
        node.remove();
        if (list) place(list, node);
      }
    });
  });

  /* Disconnected: decisions wait until the socket is back (a decision taken on a stale
     page could meet a card someone else settled), and a banner says so. */
  var offline = false;
  function disableDecisions(root, off) {
    root.querySelectorAll(".decide button, form.bulk button, form.check button, [data-bulk-pick]").forEach(function (b) {
      if (off) { b.setAttribute("data-offline", ""); b.disabled = true; }
      else if (b.hasAttribute("data-offline")) { b.removeAttribute("data-offline"); b.disabled = false; }
    });
  }
  function setOffline(off, text) {
    offline = off;
    var banner = $("offline-banner");
    if (banner) {
      banner.hidden = !off;
      if (text) banner.textContent = text;
    }
    disableDecisions(document, off);
  }

  /* The tab title carries the count of what waits; an opted-in desktop notification
     says when it grows while the tab is in the background. */
  var baseTitle = document.title;
  var lastTotal = null;
  function countOf(id) {
    var el = $(id);
    var n = el ? parseInt(el.textContent.replace(/\D+/g, ""), 10) : 0;
    return isNaN(n) ? 0 : n;
  }
  function updateTitle() {
    var total = countOf("nav-count-approvals") + countOf("nav-count-unknown");
    document.title = total ? "(" + total + ") " + baseTitle : baseTitle;
    if (lastTotal !== null && total > lastTotal) notifyNew(total - lastTotal, total);
    lastTotal = total;
  }
  function notifyNew(added, total) {
    if (!("Notification" in window) || Notification.permission !== "granted") return;
    if (localStorage.getItem("kg-notify") !== "1" || !document.hidden) return;
    try {
      new Notification("Keelgate: " + added + " new item" + (added === 1 ? "" : "s"), {
        body: total + " waiting for a person", tag: "keelgate-inbox"
      });
    } catch (e) { /* some browsers allow notifications only from a service worker */ }
  }
  function setUpNotify() {
    var button = $("notify-optin");
    if (!button || !("Notification" in window)) return;
    var on = function () { return Notification.permission === "granted" && localStorage.getItem("kg-notify") === "1"; };
    var label = function () {
      button.textContent = on() ? "Desktop notifications are on (turn off)" : "Notify me of new items on this computer";
    };
    button.hidden = false;
    label();
    button.addEventListener("click", function () {
      if (on()) { localStorage.removeItem("kg-notify"); label(); return; }
      Notification.requestPermission().then(function (answer) {
        if (answer === "granted") localStorage.setItem("kg-notify", "1");
        else flash("warning", "The browser did not allow notifications: the tab title still shows the count.");
        label();
      });
    });
  }
  document.addEventListener("DOMContentLoaded", function () { updateTitle(); setUpNotify(); pruneFlashes(); });
  /* The next action sweeps the last one's messages away (its own answer brings its own). */
  document.addEventListener("htmx:beforeRequest", function (evt) {
    var elt = evt.detail && evt.detail.elt;
    if (elt && elt.tagName === "FORM") clearFlashes();
  });

  /* Live fragments: the socket names the runs that changed and the tenants whose logs grew
     (#kg-changed); every element marked data-live-refresh re-fetches itself (its own hx-get,
     hx-trigger="kg:refresh"), those with data-live-run only when their run is named, those
     with data-live-tenant (the audit log) only when their tenant is. Debounced per element. */
  var refreshTimers = new WeakMap();
  function refreshLive(marker) {
    var full = marker.getAttribute("data-full") === "1";
    var runs = (marker.getAttribute("data-runs") || "").split(" ").filter(Boolean);
    var tenants = (marker.getAttribute("data-tenants") || "").split(" ").filter(Boolean);
    document.querySelectorAll("[data-live-refresh]").forEach(function (el) {
      var run = el.getAttribute("data-live-run");
      var tenant = el.getAttribute("data-live-tenant");
      var named = tenant ? tenants.indexOf(tenant) >= 0 : run ? runs.indexOf(run) >= 0 : runs.length > 0;
      if (!full && !named) return;
      clearTimeout(refreshTimers.get(el));
      refreshTimers.set(el, setTimeout(function () {
        if (window.htmx && document.body.contains(el)) window.htmx.trigger(el, "kg:refresh");
      }, 300));
    });
  }
  document.addEventListener("htmx:oobAfterSwap", function (evt) {
    // Fired on the element just swapped in (detail.target is the one it replaced).
    var id = evt.target && evt.target.id;
    if (id === "kg-changed") refreshLive(evt.target);
    if (id === "nav-count-approvals" || id === "nav-count-unknown") updateTitle();
    if (id === "approvals-items" || id === "unknowns-items") { if (offline) disableDecisions(evt.target, true); }
  });

  /* A bulk decision's answer names the cards it settled: drop those still shown (the live
     stream may have removed them first, so this is not an out-of-band swap that could miss). */
  document.addEventListener("htmx:afterSwap", function (evt) {
    var target = evt.detail && evt.detail.target;
    if (!target || target.id !== "bulk-result") return;
    target.querySelectorAll("[data-bulk-gone]").forEach(function (marker) {
      marker.getAttribute("data-bulk-gone").split(" ").forEach(function (id) {
        var card = id ? $(id) : null;
        if (card) card.remove();
      });
    });
  });

  /* Our own decision responses and out-of-band flashes. */
  document.addEventListener("htmx:afterSwap", pruneFlashes);
  document.addEventListener("htmx:oobAfterSwap", pruneFlashes);
  document.addEventListener("htmx:responseError", function (evt) {
    var status = evt.detail.xhr ? evt.detail.xhr.status : 0;
    var text = status === 403 ? "Your role does not allow that (403)." :
      status === 404 ? "That item no longer exists, or is not yours to see (404)." :
      "The server could not do that (" + status + "). Reload and try again.";
    flash("error", text);
  });
  document.addEventListener("htmx:sendError", function () {
    flash("error", "The server could not be reached: nothing was decided. Try again.");
  });

  /* The websocket: resume from the last chain numbers this page has seen. */
  document.addEventListener("htmx:wsOpen", function (evt) {
    var marker = $("kg-since");
    var since = {};
    try { since = JSON.parse((marker && marker.getAttribute("data-since")) || "{}"); } catch (e) { since = {}; }
    evt.detail.socketWrapper.send(JSON.stringify({ type: "resume", since: since }));
    setLive("live", "live");
    setOffline(false);
  });
  document.addEventListener("htmx:wsClose", function (evt) {
    var code = evt.detail.event ? evt.detail.event.code : 0;
    if (code === 4401) {
      setLive("closed", "signed out");
      setOffline(true, "Signed out: reload the page to log in again. Decisions are paused.");
      flash("warning", "Your session ended: reload the page to log in again.");
    } else if (code === 4400 || code === 1000) {
      setLive("closed", "offline");
      setOffline(true, "Disconnected from the server: decisions are paused. Reload the page to reconnect.");
    } else {
      setLive("reconnecting", "reconnecting…");
      setOffline(true, "Disconnected from the server: decisions are paused until the connection is back (reconnecting…).");
    }
  });

  /* After a decision removes an item, focus moves to the next one (or the one before),
     not to the page's body: a, Enter, a, Enter works down the list. beforeSwap still
     reaches the document (the item is attached then); the check runs once htmx swapped,
     and only where focus went with the item: a key pressed in between keeps its focus. */
  document.addEventListener("htmx:beforeSwap", function (evt) {
    var target = evt.detail && evt.detail.target;
    if (!target || !target.matches || !target.matches("[data-item]")) return;
    var list = items();
    var index = list.indexOf(target);
    var id = target.id;
    var next = list[index + 1] || list[index - 1] || null;
    setTimeout(function () {
      if (document.getElementById(id)) return;  // it stayed (an error, a second approver)
      var active = document.activeElement;
      if (active && active !== document.body) return;  // the person has already moved on
      if (next && document.body.contains(next)) select(next);
    }, 50);
  });

  /* Keyboard: j / k move, a approve, d deny, x select, ? help, Esc back to the item. */
  document.addEventListener("keydown", function (e) {
    if (e.defaultPrevented || e.altKey || e.ctrlKey || e.metaKey) return;
    var target = e.target;
    var typing = target && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName));
    var help = $("help");
    if (!typing && e.key === "?" && help && !help.open) {
      e.preventDefault();
      help.showModal();
      return;
    }
    if (help && help.open) return;  // the dialog handles Esc and its own buttons
    if (typing) {
      if (e.key === "Escape" && target.closest) {
        var owner = target.closest("[data-item]");
        if (owner) { e.preventDefault(); select(owner); }
      }
      return;
    }
    var list = items();
    if (!list.length) return;
    var item = current();
    var index = item ? list.indexOf(item) : -1;
    if (e.key === "j") {
      select(list[Math.min(index + 1, list.length - 1)]);
    } else if (e.key === "k") {
      select(list[Math.max(index - 1, 0)]);
    } else if (e.key === "x") {
      if (!item) return;
      var pick = item.querySelector("[data-bulk-pick]");
      if (!pick || pick.disabled) return;
      pick.checked = !pick.checked;
    } else if (e.key === "a" || e.key === "d") {
      if (!item) { item = list[0]; select(item); }
      // A high-impact call: "a" only reaches its typed confirmation, never approves alone.
      var field = e.key === "a"
        ? (item.querySelector("[data-approve-confirm]") || item.querySelector("[data-approve-note]"))
        : item.querySelector("[data-deny-note]");
      if (!field) return;
      field.focus();
    } else {
      return;
    }
    e.preventDefault();
  });

  /* Ages ("waiting 5 minutes") stay true on a page left open. */
  function age(seconds) {
    var minutes = Math.floor(seconds / 60);
    if (minutes < 1) return "0 minutes";
    if (minutes < 60) return minutes + (minutes === 1 ? " minute" : " minutes");
    var hours = Math.floor(minutes / 60);
    if (hours < 24) {
      var rest = minutes % 60;
      return hours + (hours === 1 ? " hour" : " hours") + (rest ? ", " + rest + (rest === 1 ? " minute" : " minutes") : "");
    }
    var days = Math.floor(hours / 24);
    return days + (days === 1 ? " day" : " days");
  }
  setInterval(function () {
    document.querySelectorAll("time[data-age]").forEach(function (el) {
      var at = Date.parse(el.getAttribute("datetime"));
      if (!isNaN(at)) el.textContent = age((Date.now() - at) / 1000);
    });
  }, 30000);
})();
