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

const match = location.pathname.match(/^\/sessions\/([^/]+)\/?$/);
if (match) showSession(root, decodeURIComponent(match[1]));
else showList(root);
