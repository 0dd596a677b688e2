// The share panel: publish the trained model to the server's registry (POST /api/models) and
// browse, load and delete shared models (GET /api/models, /api/models/{id}/file, DELETE).
// Nothing here runs until the person asks: the page contacts the registry only on Publish or
// "Show shared models". Owner tokens (returned once by POST) stay in this browser's
// localStorage, so the person who published a model can delete it later.
import { apiFetch } from "./api-errors.js";

const PAGE_SIZE = 5;
const TOKENS_KEY = "pib-gesture-trainer/owner-tokens";

function ownerTokens() {
  try {
    return JSON.parse(localStorage.getItem(TOKENS_KEY) ?? "{}");
  } catch {
    return {};
  }
}

function keepOwnerToken(id, token) {
  const tokens = ownerTokens();
  if (token === null) delete tokens[id];
  else tokens[id] = token;
  localStorage.setItem(TOKENS_KEY, JSON.stringify(tokens));
}

async function sha256Hex(bytes) {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}

function kib(bytes) {
  return `${(bytes / 1024).toFixed(1)} KiB`;
}

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

export class Gallery {
  // save(): the model file's bytes; current(): {labels, size} of the model in the engine or null;
  // load(bytes, item): loads a fetched model file into the engine; confirm(question): boolean.
  constructor({ save, current, load, confirm }) {
    Object.assign(this, { save, current, load, confirm });
    this.$ = (id) => document.getElementById(id);
    this.offset = 0;
    this.filter = "";
    this.shown = false;
    this.publishing = false;
    this.$("publish-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.publish();
    });
    this.$("gallery-search").addEventListener("submit", (event) => {
      event.preventDefault();
      this.filter = this.$("gallery-filter").value.trim();
      this.show(0);
    });
    this.$("gallery-newer").addEventListener("click", () => this.show(Math.max(0, this.offset - PAGE_SIZE)));
    this.$("gallery-older").addEventListener("click", () => this.show(this.offset + PAGE_SIZE));
  }

  // Publish is possible while a model is in the engine and no training runs.
  setPublishable(ready) {
    this.$("publish").disabled = !ready || this.publishing;
  }

  message(id, text, isError = false) {
    const node = this.$(id);
    node.textContent = text;
    node.classList.toggle("error", isError);
  }

  async publish() {
    const model = this.current();
    if (!model || !this.$("publish-form").reportValidity()) return;
    this.publishing = true;
    this.setPublishable(false);
    this.message("publish-message", "Publishing…");
    try {
      const bytes = await this.save();
      const form = new FormData();
      form.append("file", new Blob([bytes], { type: "application/zip" }), "gesture-classifier.pibmodel");
      form.append("name", this.$("publish-name").value.trim());
      form.append("description", this.$("publish-description").value.trim());
      form.append("labels", JSON.stringify(model.labels));
      form.append("input_shape", JSON.stringify([model.size, model.size, 3]));
      const created = await (await apiFetch("/api/models", { method: "POST", body: form })).json();
      keepOwnerToken(created.id, created.owner_token);
      this.lastPublished = created;
      this.message(
        "publish-message",
        `Published “${created.name}” (${kib(created.size)}, ${created.param_count.toLocaleString()} parameters, ` +
          `sha256 ${created.sha256.slice(0, 12)}…). This browser keeps its owner token, so you can delete it from the list.`,
      );
      if (this.shown) await this.show(0);
    } catch (error) {
      this.message("publish-message", `Could not publish: ${error.message}`, true);
    } finally {
      this.publishing = false;
      this.setPublishable(this.current() !== null);
    }
  }

  // Lists one page of shared models, newest first, filtered by the name text.
  async show(offset) {
    this.shown = true;
    this.message("gallery-message", "Asking the server…");
    try {
      const query = new URLSearchParams({ limit: String(PAGE_SIZE), offset: String(offset) });
      if (this.filter) query.set("name", this.filter);
      const page = await (await apiFetch(`/api/models?${query}`)).json();
      this.offset = offset;
      this.render(page);
    } catch (error) {
      this.message("gallery-message", `Could not list the shared models: ${error.message}`, true);
    }
  }

  render(page) {
    const { items, total, offset } = page;
    const filtered = this.filter ? ` named like “${this.filter}”` : "";
    this.message(
      "gallery-message",
      total === 0
        ? `No shared models${filtered} yet.`
        : `Models ${offset + 1}–${offset + items.length} of ${total}${filtered}, newest first.`,
    );
    const tokens = ownerTokens();
    this.$("gallery").replaceChildren(...items.map((item) => this.card(item, tokens[item.id] ?? null)));
    this.$("gallery-pages").hidden = total <= PAGE_SIZE;
    this.$("gallery-newer").disabled = offset === 0;
    this.$("gallery-older").disabled = offset + items.length >= total;
  }

  card(item, token) {
    const li = element("li", "gallery-item");
    li.dataset.modelId = item.id;
    const classes = item.labels ? `${item.labels.length} classes: ${item.labels.join(", ")}` : "no class names";
    const when = new Date(item.created_at).toLocaleString();
    li.append(
      element("span", "model-name", item.name),
      element("p", "model-meta", `${classes} · input ${item.input_shape.join(" × ")} · ${kib(item.size)} · ${when}`),
    );
    if (item.description) li.append(element("p", "model-description", item.description));
    const actions = element("div", "actions");
    const load = element("button", "secondary small load-model", "Load");
    load.type = "button";
    load.setAttribute("aria-label", `Load the shared model ${item.name}`);
    load.addEventListener("click", () => this.loadModel(item));
    actions.append(load);
    if (token !== null) {
      const remove = element("button", "danger small delete-model", "Delete");
      remove.type = "button";
      remove.setAttribute("aria-label", `Delete your shared model ${item.name}`);
      remove.addEventListener("click", () => this.deleteModel(item, token));
      actions.append(remove);
    }
    li.append(actions);
    return li;
  }

  // Fetches the file, checks it against the sha256 the server lists, and loads it.
  async loadModel(item) {
    this.message("gallery-message", `Loading “${item.name}”…`);
    try {
      const bytes = new Uint8Array(await (await apiFetch(item.file_url)).arrayBuffer());
      if ((await sha256Hex(bytes)) !== item.sha256) {
        throw new Error("the file's sha256 differs from the one the server lists; it was not loaded");
      }
      await this.load(bytes, item);
      this.message("gallery-message", `Loaded “${item.name}”: live prediction uses it now.`);
    } catch (error) {
      const reason = String(error.message).trim().split("\n").pop(); // a Python traceback's last line
      this.message("gallery-message", `Could not load “${item.name}”: ${reason}`, true);
    }
  }

  async deleteModel(item, token) {
    if (!this.confirm(`Delete your shared model “${item.name}” from the server?`)) return;
    try {
      await apiFetch(`/api/models/${item.id}`, { method: "DELETE", headers: { Authorization: `Bearer ${token}` } });
      keepOwnerToken(item.id, null);
      await this.show(this.offset);
      this.message("gallery-message", `Deleted “${item.name}” from the server.`);
    } catch (error) {
      if (error.status === 404) keepOwnerToken(item.id, null);
      this.message("gallery-message", `Could not delete “${item.name}”: ${error.message}`, true);
    }
  }
}
