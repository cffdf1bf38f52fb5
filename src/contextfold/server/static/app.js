// The page is one shell: the path says which screen to draw.
import { forgetKey, storedKey } from "./api.js";
import { showList } from "./list.js";
import { showSession } from "./session.js";

const root = document.getElementById("app");
const forget = document.getElementById("forget-key");
forget.hidden = !storedKey();
forget.addEventListener("click", () => {
  forgetKey();
  location.reload();
});

// An address written as /#/sessions/<id> means /sessions/<id>.
const hashed = location.hash.match(/^#\/sessions\/([^/]+)$/);
if (hashed) history.replaceState(null, "", "/sessions/" + hashed[1]);

const match = location.pathname.match(/^\/sessions\/([^/]+)\/?$/);
if (match) showSession(root, decodeURIComponent(match[1]));
else showList(root);
