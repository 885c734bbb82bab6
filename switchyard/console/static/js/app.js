// The console's shell: reads the host's views, asks for the API key when the host needs one, and switches
// views by the URL's hash (#playground, #dashboard, #fleet, #agents) so each view has a link.
import { ApiError, AuthError, getJson, storeKey, storedKey } from "./api.js";
import { AgentsView } from "./agents.js";
import { DashboardView } from "./dashboard.js";
import { FleetView } from "./fleet.js";
import { PlaygroundView } from "./playground.js";

const LABELS = { playground: "Playground", dashboard: "Dashboard", fleet: "Fleet", agents: "Agent runs" };
const FACTORIES = { playground: PlaygroundView, dashboard: DashboardView, fleet: FleetView, agents: AgentsView };
const $ = (id) => document.getElementById(id);

class Console {
  constructor(config) {
    this.config = config;
    this.views = {};
    this.current = null;
    for (const name of config.views) this.views[name] = new FACTORIES[name]((error, options) => this.failed(error, options));
    document.title = `${config.title} console`;
    $("title").textContent = config.title;
    $("nav").replaceChildren(...config.views.map((name) => {
      const link = document.createElement("a");
      link.href = `#${name}`;
      link.textContent = LABELS[name];
      link.id = `nav-${name}`;
      return link;
    }));
    $("change-key").hidden = !config.key_required;
    $("change-key").addEventListener("click", () => this.askForKey());
    $("key-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.tryKey($("key-input").value.trim());
    });
    // Without a key nothing works: Escape leaves the dialog open.
    $("key-dialog").addEventListener("cancel", (event) => event.preventDefault());
    window.addEventListener("hashchange", () => this.route());
  }

  start() {
    if (this.config.key_required && !storedKey()) this.askForKey();
    else this.route();
  }

  route() {
    const wanted = location.hash.slice(1);
    const name = this.config.views.includes(wanted) ? wanted : this.config.views[0];
    if (this.current && this.current !== name) this.views[this.current].close();
    for (const view of Object.keys(LABELS)) {
      const section = $(`view-${view}`);
      section.hidden = view !== name;
      const link = $(`nav-${view}`);
      if (view === name) link?.setAttribute("aria-current", "page");
      else link?.removeAttribute("aria-current");
    }
    this.current = name;
    this.banner("");
    this.views[name].open();
  }

  askForKey(message = "") {
    for (const view of Object.values(this.views)) view.close();
    const error = $("key-error");
    error.textContent = message;
    error.hidden = !message;
    const dialog = $("key-dialog");
    if (!dialog.open) dialog.showModal();
    $("key-input").focus();
  }

  async tryKey(key) {
    if (!key) return;
    storeKey(key);
    try {
      await getJson("/v1/console/ping");
    } catch (error) {
      storeKey(null);
      const message = error instanceof AuthError ? "The server refused this key." : error.message;
      this.askForKey(message);
      return;
    }
    $("key-dialog").close();
    $("key-input").value = "";
    this.current = null;
    for (const view of Object.values(this.views)) if ("loaded" in view) view.loaded = false;
    this.route();
  }

  failed(error, { quiet = false } = {}) {
    if (error instanceof AuthError) {
      storeKey(null);
      this.askForKey("The server refused the key; enter it again.");
    } else if (error instanceof ApiError && error.status === 403) {
      this.banner(error.message);  // this key may not see this view
    } else if (!quiet) {
      this.banner(`Lost contact with the server: ${error.message}`);
    }
  }

  banner(text) {
    $("banner").textContent = text;
    $("banner").hidden = !text;
  }
}

const config = await getJson("/ui/config.json", { auth: false });
const app = new Console(config);
window.switchyardConsole = app;
app.start();
